package policy

import "fmt"

// prefixHash sends every request whose first block is the same to the same worker, by
// rendezvous (highest-random-weight) hashing of Request.FirstBlock with each Candidate.Key:
// every gateway replica agrees without shared state, and removing a worker moves only the
// prefixes that lived on it. It ignores load, so a hot prefix stays on one worker. A request
// with no full block has nothing to hash and goes to the least-loaded worker (reason
// least_load).
type prefixHash struct {
	rnd func() uint64
}

func newPrefixHash(cfg Config) (*prefixHash, error) {
	return &prefixHash{rnd: cfg.rand()}, nil
}

// Pick implements Policy.
func (p *prefixHash) Pick(req *Request, cands []Candidate) Decision {
	if req.Blocks <= 0 {
		return Decision{Index: leastLoaded(p.rnd, cands), Reason: ReasonLeastLoad}
	}
	best := 0
	bestW := rendezvousWeight(req.FirstBlock, cands[0].Key)
	for i := 1; i < len(cands); i++ {
		// Strictly greater: on an (astronomically unlikely) equal weight the earlier wins,
		// which keeps the choice deterministic for a given candidate order.
		if w := rendezvousWeight(req.FirstBlock, cands[i].Key); w > bestW {
			best, bestW = i, w
		}
	}
	return Decision{Index: best, Reason: ReasonPrefixHash}
}

// rendezvousWeight mixes a prefix hash with a worker key. Both inputs may be structured (small
// keys, related hashes), so each goes through the splitmix64 finaliser before and after being
// combined; the result is well spread for every (prefix, worker) pair.
func rendezvousWeight(prefix, key uint64) uint64 {
	return mix64(prefix ^ mix64(key+0x9e3779b97f4a7c15))
}

// mix64 is the splitmix64 finaliser (Steele, Lea, Flood 2014), a bijection on uint64.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// String returns the policy's name.
func (p *prefixHash) String() string { return NamePrefixHash }

var (
	_ Policy       = (*prefixHash)(nil)
	_ fmt.Stringer = (*prefixHash)(nil)
)
