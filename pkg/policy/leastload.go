package policy

import "fmt"

// leastLoad picks the candidate with the lowest Load, uniformly at random among ties; it
// ignores the cache.
type leastLoad struct {
	rnd func() uint64
}

func newLeastLoad(cfg Config) (*leastLoad, error) {
	return &leastLoad{rnd: cfg.rand()}, nil
}

// Pick implements Policy.
func (p *leastLoad) Pick(_ *Request, cands []Candidate) Decision {
	return Decision{Index: leastLoaded(p.rnd, cands), Reason: ReasonLeastLoad}
}

// String returns the policy's name.
func (p *leastLoad) String() string { return NameLeastLoad }

var (
	_ Policy       = (*leastLoad)(nil)
	_ fmt.Stringer = (*leastLoad)(nil)
)
