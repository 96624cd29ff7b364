package policy

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

var _ Policy = (*randomPolicy)(nil)
