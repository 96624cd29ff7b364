package policy

import (
	"errors"
	"fmt"
	"slices"
)

// ErrUnknownPolicy is returned (wrapped) by New for a name that Names does not list.
var ErrUnknownPolicy = errors.New("unknown policy")

// Policy names accepted by New.
const (
	NameCacheAware = "cache_aware"
	NameCost       = "cost"
	NameRoundRobin = "round_robin"
	NameRandom     = "random"
	NamePowerOfTwo = "power_of_two"
	NameLeastLoad  = "least_load"
	NamePrefixHash = "prefix_hash"
)

type factory func(cfg Config) (Policy, error)

// factories is the read-only name → constructor table (STYLE rule 6: no init registration, no
// exported mutable map). It is never written after package initialisation.
var factories = map[string]factory{
	NameCacheAware: func(cfg Config) (Policy, error) { return newCacheAware(cfg) },
	NameCost:       func(cfg Config) (Policy, error) { return newCost(cfg) },
	NameRoundRobin: func(cfg Config) (Policy, error) { return newRoundRobin(cfg) },
	NameRandom:     func(cfg Config) (Policy, error) { return newRandom(cfg) },
	NamePowerOfTwo: func(cfg Config) (Policy, error) { return newPowerOfTwo(cfg) },
	NameLeastLoad:  func(cfg Config) (Policy, error) { return newLeastLoad(cfg) },
	NamePrefixHash: func(cfg Config) (Policy, error) { return newPrefixHash(cfg) },
}

// New builds the policy called name with cfg, validating only the fields that policy reads.
// An unknown name yields an error wrapping ErrUnknownPolicy. The result is safe for concurrent
// Pick calls; stateful policies (round_robin) keep their state in the returned value, so build
// one per picker generation or share it deliberately.
func New(name string, cfg Config) (Policy, error) {
	f, ok := factories[name]
	if !ok {
		return nil, fmt.Errorf("policy: new %q: %w (known: %v)", name, ErrUnknownPolicy, Names())
	}
	p, err := f(cfg)
	if err != nil {
		return nil, fmt.Errorf("policy: new %q: %w", name, err)
	}
	return p, nil
}

// Names returns the accepted policy names, sorted; the caller owns the slice.
func Names() []string {
	names := make([]string, 0, len(factories))
	for n := range factories {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
