package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Default values of the Config knobs. The cache_aware thresholds are SMG's CLI defaults
// (DESIGN.md §5); the cost ones are Dynamo's (overlap weight 1, deterministic argmin) except
// DecodeWeight (see its field); BoundedLoadFactor is kvgate's (see its field).
const (
	DefaultCacheThreshold      = 0.3
	DefaultBalanceAbsThreshold = 64
	DefaultBalanceRelThreshold = 1.5
	DefaultBoundedLoadFactor   = 1.25
	DefaultBoundedLoadSlack    = 8
	DefaultPrefillWeight       = 1.0
	DefaultQueueWeight         = 0.25
	DefaultDecodeWeight        = 1.0 / 64
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
	// define SMG's imbalance: max_load − min_load > abs AND max_load > rel × min_load. cache_aware
	// then picks the least-loaded worker; cost filters out the workers that are that far above
	// the least-loaded one. Abs ≥ 0, rel ≥ 1.
	BalanceAbsThreshold int64   `yaml:"balance_abs_threshold" json:"balance_abs_threshold"`
	BalanceRelThreshold float64 `yaml:"balance_rel_threshold" json:"balance_rel_threshold"`

	// BoundedLoadFactor (cache_aware, cost; default 1.25) and BoundedLoadSlack (default 8)
	// bound the load of a worker that may win on its cache: a worker whose load is at or above
	// ⌈factor × (total load + 1) ÷ workers⌉ + slack (consistent hashing with bounded loads,
	// Mirrokni et al. 2018, plus a slack) is not chosen for its match, so a hot prefix spills
	// to the least-loaded worker, which then holds a copy, and requests for it spread over the
	// workers holding it by load. The slack keeps a handful of requests from ever spilling: at
	// low load a pile-up costs nothing, and a spill costs a copy of the prefix. Factor 0 turns
	// the bound off: cache_aware is then exactly SMG's cascade. Factor 0 or ≥ 1; slack ≥ 0.
	BoundedLoadFactor float64 `yaml:"bounded_load_factor" json:"bounded_load_factor"`
	BoundedLoadSlack  int64   `yaml:"bounded_load_slack" json:"bounded_load_slack"`

	// PrefillWeight (cost; default 1) multiplies the request's blocks the worker does not hold
	// (request blocks − matched): the prefill a cache hit saves. ≥ 0.
	PrefillWeight float64 `yaml:"prefill_weight" json:"prefill_weight"`

	// QueueWeight (cost; default 1/4) multiplies the blocks the worker's in-flight requests
	// have not prefilled yet (Candidate.Prefill), which queue ahead of this request's first
	// token. For that one request they cost as much as its own prefill (Dynamo weighs both
	// alike), but a request sent away from its cached prefix to a shorter queue copies the
	// prefix and evicts others, which costs the requests after it: at weight 1 a cache hit
	// loses to one queued prefill of its size, and on DESIGN §9 that spreads prefixes until
	// the hit rate falls from 50% to 37%. At 1/4 a hit moves only when its worker has about
	// four more such prefills queued than another. ≥ 0.
	QueueWeight float64 `yaml:"queue_weight" json:"queue_weight"`

	// DecodeWeight (cost; default 1/64) multiplies the KV blocks the worker's in-flight
	// requests hold (Candidate.Active), in the same unit: what decoding them costs a new
	// request's first token, in blocks of prefill. A decode step reads every active block, but
	// an engine prefills a block in far more time than a step spends on one active block, so
	// the weight is small: at 1/64 a running request of 64 blocks weighs as much as one block
	// of prefill, and a 62-block cache hit loses only to about 60 more such requests (SMG's
	// imbalance threshold is 64). ≥ 0.
	DecodeWeight float64 `yaml:"decode_weight" json:"decode_weight"`

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
		BoundedLoadFactor:   DefaultBoundedLoadFactor,
		BoundedLoadSlack:    DefaultBoundedLoadSlack,
		PrefillWeight:       DefaultPrefillWeight,
		QueueWeight:         DefaultQueueWeight,
		DecodeWeight:        DefaultDecodeWeight,
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
	if !(c.BoundedLoadFactor == 0 || c.BoundedLoadFactor >= 1) || math.IsInf(c.BoundedLoadFactor, 0) {
		return fmt.Errorf("policy: bounded_load_factor %g: must be 0 (off) or a finite number >= 1", c.BoundedLoadFactor)
	}
	if c.BoundedLoadSlack < 0 {
		return fmt.Errorf("policy: bounded_load_slack %d: must be >= 0", c.BoundedLoadSlack)
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
	if !(c.QueueWeight >= 0) || math.IsInf(c.QueueWeight, 0) {
		return fmt.Errorf("policy: queue_weight %g: must be a finite number >= 0", c.QueueWeight)
	}
	if !(c.DecodeWeight >= 0) || math.IsInf(c.DecodeWeight, 0) {
		return fmt.Errorf("policy: decode_weight %g: must be a finite number >= 0", c.DecodeWeight)
	}
	if !(c.Temperature >= 0) || math.IsInf(c.Temperature, 0) {
		return fmt.Errorf("policy: temperature %g: must be a finite number >= 0", c.Temperature)
	}
	return c.validateBalance()
}
