package policy

import (
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

func TestNames(t *testing.T) {
	want := []string{"cache_aware", "cost", "least_load", "power_of_two", "prefix_hash", "random", "round_robin"}
	if diff := cmp.Diff(want, Names()); diff != "" {
		t.Errorf("Names() mismatch (-want +got):\n%s", diff)
	}
	for _, n := range Names() {
		t.Run(n, func(t *testing.T) {
			p, err := New(n, DefaultConfig())
			if err != nil || p == nil {
				t.Fatalf("New(%q, DefaultConfig()) = %v, %v; want a policy, nil", n, p, err)
			}
			d := p.Pick(&Request{Blocks: 4, FirstBlock: 7, Tokens: 64}, []Candidate{cand(0, 0, indexer.SourceNone)})
			if d.Index != 0 {
				t.Errorf("Pick with one candidate: got index %d, want 0", d.Index)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	mod := func(f func(*Config)) Config {
		c := DefaultConfig()
		f(&c)
		return c
	}
	tests := []struct {
		name    string
		policy  string
		cfg     Config
		wantErr bool
		unknown bool
	}{
		{name: "unknown name", policy: "fastest", cfg: DefaultConfig(), wantErr: true, unknown: true},
		{name: "empty name", policy: "", cfg: DefaultConfig(), wantErr: true, unknown: true},
		{name: "threshold above 1", policy: NameCacheAware, cfg: mod(func(c *Config) { c.CacheThreshold = 1.5 }), wantErr: true},
		{name: "threshold negative", policy: NameCacheAware, cfg: mod(func(c *Config) { c.CacheThreshold = -0.1 }), wantErr: true},
		{name: "threshold zero ok", policy: NameCacheAware, cfg: mod(func(c *Config) { c.CacheThreshold = 0 })},
		{name: "abs negative", policy: NameCacheAware, cfg: mod(func(c *Config) { c.BalanceAbsThreshold = -1 }), wantErr: true},
		{name: "rel below 1", policy: NameCacheAware, cfg: mod(func(c *Config) { c.BalanceRelThreshold = 0.5 }), wantErr: true},
		{name: "zero config cache_aware rejected", policy: NameCacheAware, cfg: Config{}, wantErr: true},
		{name: "zero config round_robin ok", policy: NameRoundRobin, cfg: Config{}},
		{name: "zero config prefix_hash ok", policy: NamePrefixHash, cfg: Config{}},
		{name: "cost negative weight", policy: NameCost, cfg: mod(func(c *Config) { c.PrefillWeight = -1 }), wantErr: true},
		{name: "cost NaN temperature", policy: NameCost, cfg: mod(func(c *Config) { c.Temperature = nan() }), wantErr: true},
		{name: "cost negative decode weight", policy: NameCost, cfg: mod(func(c *Config) { c.DecodeWeight = -2 }), wantErr: true},
		{name: "cost infinite decode weight", policy: NameCost, cfg: mod(func(c *Config) { c.DecodeWeight = math.Inf(1) }), wantErr: true},
		{name: "bound factor below 1", policy: NameCacheAware, cfg: mod(func(c *Config) { c.BoundedLoadFactor = 0.5 }), wantErr: true},
		{name: "bound factor NaN", policy: NameCost, cfg: mod(func(c *Config) { c.BoundedLoadFactor = nan() }), wantErr: true},
		{name: "bound factor off ok", policy: NameCacheAware, cfg: mod(func(c *Config) { c.BoundedLoadFactor = 0 })},
		{name: "cost rel NaN", policy: NameCost, cfg: mod(func(c *Config) { c.BalanceRelThreshold = nan() }), wantErr: true},
		{name: "cost ok", policy: NameCost, cfg: mod(func(c *Config) { c.Temperature = 0.5 })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.policy, tc.cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("New(%q) error = %v, want error %v", tc.policy, err, tc.wantErr)
			}
			if got := errors.Is(err, ErrUnknownPolicy); got != tc.unknown {
				t.Errorf("errors.Is(err, ErrUnknownPolicy) = %v, want %v (err %v)", got, tc.unknown, err)
			}
		})
	}
}

func nan() float64 {
	var zero float64
	return zero / zero
}
