package policy

import (
	"fmt"
	"sync/atomic"
)

// roundRobin cycles through the candidates with one shared atomic counter; it ignores the
// cache and load. The order is relative to the candidate slice, so it is only a strict cycle
// while the worker set stays the same. It must not be copied.
type roundRobin struct {
	next atomic.Uint64
}

func newRoundRobin(cfg Config) (*roundRobin, error) {
	p := &roundRobin{}
	// Start at a random offset so that gateway replicas do not march in lock-step.
	p.next.Store(cfg.rand()())
	return p, nil
}

// Pick implements Policy.
func (p *roundRobin) Pick(_ *Request, cands []Candidate) Decision {
	n := p.next.Add(1) - 1
	return Decision{Index: int(n % uint64(len(cands))), Reason: ReasonRoundRobin}
}

// String returns the policy's name.
func (p *roundRobin) String() string { return NameRoundRobin }

// Explain implements Explainer: the next worker of the rotation depends on every other
// request, and asking would advance it, so no worker is named.
func (p *roundRobin) Explain(_ *Request, _ []Candidate) (Decision, string) {
	return Decision{Index: -1, Reason: ReasonRoundRobin}, "round_robin takes the next worker of a shared rotation; explaining does not advance it, so no worker is named"
}

var (
	_ Policy       = (*roundRobin)(nil)
	_ Explainer    = (*roundRobin)(nil)
	_ fmt.Stringer = (*roundRobin)(nil)
)
