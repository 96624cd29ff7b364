package policy

import "fmt"

// powerOfTwo samples two distinct candidates at random and keeps the less loaded one (the first
// sampled on a tie): "the power of two choices", near least-load balance without scanning or
// herding every gateway replica onto the same idle worker.
type powerOfTwo struct {
	rnd func() uint64
}

func newPowerOfTwo(cfg Config) (*powerOfTwo, error) {
	return &powerOfTwo{rnd: cfg.rand()}, nil
}

// Pick implements Policy.
func (p *powerOfTwo) Pick(_ *Request, cands []Candidate) Decision {
	n := len(cands)
	if n == 1 {
		return Decision{Index: 0, Reason: ReasonPowerOfTwo}
	}
	i := randIntn(p.rnd, n)
	j := randIntn(p.rnd, n-1)
	if j >= i {
		j++ // distinct from i, still uniform over the others
	}
	if cands[j].Load < cands[i].Load {
		i = j
	}
	return Decision{Index: i, Reason: ReasonPowerOfTwo}
}

// String returns the policy's name.
func (p *powerOfTwo) String() string { return NamePowerOfTwo }

var (
	_ Policy       = (*powerOfTwo)(nil)
	_ fmt.Stringer = (*powerOfTwo)(nil)
)
