package policy

import "fmt"

// randomPolicy picks a uniformly random candidate; it ignores the cache and load.
type randomPolicy struct {
	rnd func() uint64
}

func newRandom(cfg Config) (*randomPolicy, error) {
	return &randomPolicy{rnd: cfg.rand()}, nil
}

// Pick implements Policy.
func (p *randomPolicy) Pick(_ *Request, cands []Candidate) Decision {
	return Decision{Index: randIntn(p.rnd, len(cands)), Reason: ReasonRandom}
}

// String returns the policy's name.
func (p *randomPolicy) String() string { return NameRandom }

// Explain implements Explainer: a draw would consume the shared random source, so no worker is
// named.
func (p *randomPolicy) Explain(_ *Request, _ []Candidate) (Decision, string) {
	return Decision{Index: -1, Reason: ReasonRandom}, "random picks uniformly among the eligible workers; no worker is named"
}

var (
	_ Policy       = (*randomPolicy)(nil)
	_ Explainer    = (*randomPolicy)(nil)
	_ fmt.Stringer = (*randomPolicy)(nil)
)
