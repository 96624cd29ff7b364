package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Default values of the Config knobs. The cache_aware ones are SMG's CLI defaults (DESIGN.md §5);
// the cost ones are Dynamo's (overlap weight 1, deterministic argmin).
const (
	DefaultCacheThreshold      = 0.3
	DefaultBalanceAbsThreshold = 64
	DefaultBalanceRelThreshold = 1.5
	DefaultPrefillWeight       = 1.0
	DefaultTemperature         = 0.0
)

// Config holds the tunables of every policy; each policy reads only the fields it documents
// and New validates only those. Decode user config onto DefaultConfig() so that absent fields
// keep their defaults: the zero Config is not the default one (a zero BalanceRelThreshold is
// rejected by cache_aware and cost rather than silently replaced).
type Config struct {
	// CacheThreshold (cache_aware; default 0.3) is the minimum match ratio, matched blocks ÷
	// request blocks, for the best-matching worker to be chosen. In [0,1]. A worker with no
	// matched block never counts as a match, even at threshold 0.
	CacheThreshold float64 `yaml:"cache_threshold" json:"cache_threshold"`

	// BalanceAbsThreshold (cache_aware, cost; default 64) and BalanceRelThreshold (default 1.5)
	// define imbalance: max_load − min_load > abs AND max_load > rel × min_load. cache_aware
	// then picks the least-loaded worker; cost filters out the workers that are that far above
	// the least-loaded one. Abs ≥ 0, rel ≥ 1.
	BalanceAbsThreshold int64   `yaml:"balance_abs_threshold" json:"balance_abs_threshold"`
	BalanceRelThreshold float64 `yaml:"balance_rel_threshold" json:"balance_rel_threshold"`

	// PrefillWeight (cost; default 1) multiplies the blocks a worker would have to prefill,
	// request blocks − matched, against its in-flight load in blocks. ≥ 0.
	PrefillWeight float64 `yaml:"prefill_weight" json:"prefill_weight"`

	// LoadBlocksPerRequest (cost; default 0) is the KV blocks assumed per in-flight request
	// when converting Candidate.Load into blocks; 0 means "like the request being routed"
	// (its Blocks, at least 1). ≥ 0.
	LoadBlocksPerRequest float64 `yaml:"load_blocks_per_request" json:"load_blocks_per_request"`

	// Temperature (cost; default 0) turns the argmin into softmax sampling over the
	// min-max-normalised scores: 0 always takes the best score (ties at random), larger values
	// spread requests more evenly. ≥ 0.
	Temperature float64 `yaml:"temperature" json:"temperature"`

	// Rand returns uniformly distributed 64-bit values; it breaks ties and drives random,
	// power_of_two and softmax sampling. It must be safe for concurrent use. nil means
	// math/rand/v2's Uint64, which is seeded by the runtime and lock-free (a per-thread ChaCha8
	// state). Tests inject a deterministic source.
	Rand func() uint64 `yaml:"-" json:"-"`
}

// DefaultConfig returns the documented defaults, with Rand nil (the runtime source).
func DefaultConfig() Config {
	return Config{
		CacheThreshold:      DefaultCacheThreshold,
		BalanceAbsThreshold: DefaultBalanceAbsThreshold,
		BalanceRelThreshold: DefaultBalanceRelThreshold,
		PrefillWeight:       DefaultPrefillWeight,
		Temperature:         DefaultTemperature,
	}
}

func (c *Config) rand() func() uint64 {
	if c.Rand != nil {
		return c.Rand
	}
	return rand.Uint64
}

func (c *Config) validateBalance() error {
	if c.BalanceAbsThreshold < 0 {
		return fmt.Errorf("policy: balance_abs_threshold %d: must be >= 0", c.BalanceAbsThreshold)
	}
	if !(c.BalanceRelThreshold >= 1) || math.IsInf(c.BalanceRelThreshold, 0) {
		return fmt.Errorf("policy: balance_rel_threshold %g: must be a finite number >= 1", c.BalanceRelThreshold)
	}
	return nil
}

func (c *Config) validateCacheAware() error {
	if !(c.CacheThreshold >= 0 && c.CacheThreshold <= 1) {
		return fmt.Errorf("policy: cache_threshold %g: must be in [0,1]", c.CacheThreshold)
	}
	return c.validateBalance()
}

func (c *Config) validateCost() error {
	if !(c.PrefillWeight >= 0) || math.IsInf(c.PrefillWeight, 0) {
		return fmt.Errorf("policy: prefill_weight %g: must be a finite number >= 0", c.PrefillWeight)
	}
	if !(c.LoadBlocksPerRequest >= 0) || math.IsInf(c.LoadBlocksPerRequest, 0) {
		return fmt.Errorf("policy: load_blocks_per_request %g: must be a finite number >= 0", c.LoadBlocksPerRequest)
	}
	if !(c.Temperature >= 0) || math.IsInf(c.Temperature, 0) {
		return fmt.Errorf("policy: temperature %g: must be a finite number >= 0", c.Temperature)
	}
	return c.validateBalance()
}
