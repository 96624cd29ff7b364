package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// Config is the engine model of one simulated engine rank. The zero value of a field means its
// default (see DefaultConfig); defaults approximate one TP=2 H100 serving a 32B model
// (DESIGN.md §8): about 12k prefill tokens/s, about 30 ms per decode step at batch 32 and a KV
// capacity of about 200k tokens.
type Config struct {
	// NumBlocks and BlockSize size the paged KV cache (default 12500 blocks of 16 tokens).
	NumBlocks int `json:"num_blocks" yaml:"num_blocks"`
	BlockSize int `json:"block_size" yaml:"block_size"`
	// MaxRunning caps the sequences in the running batch (vLLM max_num_seqs; default 256).
	MaxRunning int `json:"max_running" yaml:"max_running"`
	// MaxBatchedTokens is the per-step token budget shared by decodes and (chunked) prefills
	// (vLLM max_num_batched_tokens; default 8192, vLLM V1's for an 80 GB GPU's API server).
	MaxBatchedTokens int `json:"max_batched_tokens" yaml:"max_batched_tokens"`
	// Step time = StepOverhead + prefill tokens × PrefillPerToken + sequences in the step ×
	// DecodePerSeq (defaults 26 ms, 1/12000 s and 125 µs: 30 ms for a decode step at batch 32,
	// 58 ms at batch 256, since decoding is bound by reading the weights, not the batch).
	StepOverhead    time.Duration `json:"step_overhead" yaml:"step_overhead"`
	PrefillPerToken time.Duration `json:"prefill_per_token" yaml:"prefill_per_token"`
	DecodePerSeq    time.Duration `json:"decode_per_seq" yaml:"decode_per_seq"`
	// MaxModelLen bounds prompt + output tokens (default 32768).
	MaxModelLen int `json:"max_model_len" yaml:"max_model_len"`
	// VocabSize bounds prompt token ids and is the range output ids are drawn from (default
	// 151936, Qwen2.5-32B's).
	VocabSize int `json:"vocab_size" yaml:"vocab_size"`
	// EOSTokenIDs are never sampled, so output length is max_tokens unless a stop token id of
	// the request is drawn.
	EOSTokenIDs []uint32 `json:"eos_token_ids" yaml:"eos_token_ids"`
	// HashSeed seeds block 0's parent digest (see rootHash); "" is a valid seed.
	HashSeed string `json:"hash_seed" yaml:"hash_seed"`
}

// DefaultConfig returns the defaults described on Config.
func DefaultConfig() Config {
	return Config{
		NumBlocks:        12500,
		BlockSize:        16,
		MaxRunning:       256,
		MaxBatchedTokens: 8192,
		StepOverhead:     26 * time.Millisecond,
		PrefillPerToken:  time.Second / 12000,
		DecodePerSeq:     125 * time.Microsecond,
		MaxModelLen:      32768,
		VocabSize:        151936,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.NumBlocks == 0 {
		c.NumBlocks = d.NumBlocks
	}
	if c.BlockSize == 0 {
		c.BlockSize = d.BlockSize
	}
	if c.MaxRunning == 0 {
		c.MaxRunning = d.MaxRunning
	}
	if c.MaxBatchedTokens == 0 {
		c.MaxBatchedTokens = d.MaxBatchedTokens
	}
	if c.StepOverhead == 0 {
		c.StepOverhead = d.StepOverhead
	}
	if c.PrefillPerToken == 0 {
		c.PrefillPerToken = d.PrefillPerToken
	}
	if c.DecodePerSeq == 0 {
		c.DecodePerSeq = d.DecodePerSeq
	}
	if c.MaxModelLen == 0 {
		c.MaxModelLen = d.MaxModelLen
	}
	if c.VocabSize == 0 {
		c.VocabSize = d.VocabSize
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.NumBlocks < 1, c.BlockSize < 1:
		return fmt.Errorf("sim: config: %d blocks of %d tokens: %w", c.NumBlocks, c.BlockSize, ErrBadCacheConfig)
	case c.MaxRunning < 1, c.MaxBatchedTokens < 1, c.MaxModelLen < 2, c.VocabSize < 2:
		return fmt.Errorf("sim: config: max_running %d, max_batched_tokens %d, max_model_len %d, vocab %d must be positive: %w",
			c.MaxRunning, c.MaxBatchedTokens, c.MaxModelLen, c.VocabSize, ErrBadConfig)
	case c.StepOverhead < 0, c.PrefillPerToken < 0, c.DecodePerSeq < 0:
		return fmt.Errorf("sim: config: negative step cost: %w", ErrBadConfig)
	case len(c.EOSTokenIDs) >= c.VocabSize:
		return fmt.Errorf("sim: config: every token is an EOS token: %w", ErrBadConfig)
	}
	return nil
}

// Sentinel errors of the engine model.
var (
	ErrBadConfig     = errors.New("sim: bad config")
	ErrEmptyPrompt   = errors.New("sim: empty prompt")
	ErrBadMaxTokens  = errors.New("sim: max_tokens must be at least 1")
	ErrPromptTooLong = errors.New("sim: prompt plus max_tokens exceeds the context length")
	ErrTooLarge      = errors.New("sim: request needs more KV blocks than the cache has")
	ErrStopped       = errors.New("sim: engine stopped")
)

type reqState uint8

const (
	stateNew reqState = iota
	stateWaiting
	stateRunning
	stateFinished
	stateAborted
)

// Request is one sequence in the engine. The caller fills the exported input fields before
// Add and must not change them afterwards; everything else is owned by the engine's core (and through
// it by the Engine's loop goroutine) until the request finishes.
type Request struct {
	// ID identifies the request in logs and aborts.
	ID string
	// Prompt holds the prompt token ids (at least one).
	Prompt []uint32
	// MaxTokens is the number of tokens to generate unless a stop token id is drawn first.
	MaxTokens int
	// StopTokenIDs end generation with finish reason "stop" when drawn (they are included in
	// the output, as vLLM does for stop token ids).
	StopTokenIDs []uint32
	// Seed seeds the output token sequence; see seedFor.
	Seed uint64
	// Script, when set, is the exact output (Replies): its tokens in order, then finish reason
	// "stop", unless MaxTokens ends it first. The script's end stands for the model's EOS, so
	// IgnoreEOS and MinTokens let generation continue past it with sampled tokens.
	Script []uint32
	// MinTokens is vLLM's min_tokens: until that many tokens are out, neither a stop token id
	// (never sampled then, as vLLM masks them) nor the script's end stops the request.
	MinTokens int
	// IgnoreEOS is vLLM's ignore_eos: the script's end does not stop the request (sampling
	// never draws an EOS id anyway); stop token ids still do.
	IgnoreEOS bool
	// HoldKV keeps the request's blocks referenced after it finishes, as a prefill engine
	// keeps them for its decode engine to read (wire/pd.md §2.7), until Engine.ReleaseHeld.
	HoldKV bool
	// Media are the prompt's media items' placeholder ranges and identifiers (sorted, not
	// overlapping): every block overlapping an item is keyed with its identifier, in the
	// block's digest and in its BlockStored event's extra keys, as vLLM keys them.
	Media []indexer.ExtraSpan
	// RemoteTokens is how many leading prompt tokens arrived by KV transfer (a decode engine
	// of a pair): they are scheduled without prefill cost, except the prompt's last token,
	// which is always computed (wire/pd.md §2.4), and cached like computed ones. A
	// preemption forgets them (the engine then recomputes locally).
	RemoteTokens int

	// Arrival, FirstToken and Done are simulated times (since the engine started) of
	// admission, the first output token and completion. Valid once the respective event
	// happened; read them from the loop goroutine or after the request finished.
	Arrival, FirstToken, Done time.Duration
	// CachedTokens is the number of prompt tokens found in the prefix cache when the request
	// was first scheduled (usage.prompt_tokens_details.cached_tokens).
	CachedTokens int
	// FinishReason is "length", "stop" or "abort" once the request ended.
	FinishReason string

	tokens       []uint32    // prompt + generated tokens
	hashes       []BlockHash // digests of the full blocks of tokens computed so far
	blocks       []int32     // physical blocks, in chain order
	numComputed  int         // tokens whose KV is in blocks
	numCommitted int         // leading blocks already offered to the cache
	numNew       int         // tokens scheduled in the current step
	numOutput    int
	scheduled    bool // counted in prefix-cache stats and CachedTokens
	remote       int  // RemoteTokens still to be credited (0 after a preemption)
	state        reqState
	rng          uint64
	stream       *Stream // set by Engine.Submit
}

// Output returns the generated tokens so far. Only the loop goroutine (or anyone after the
// request finished) may call it; the slice must not be modified.
func (r *Request) Output() []uint32 {
	if len(r.tokens) < len(r.Prompt) {
		return nil
	}
	return r.tokens[len(r.Prompt):]
}

// seedFor returns the output seed of sample index of a request: derived from the client's
// seed when it gave one, else from the prompt tokens, so identical requests produce identical
// streams.
func seedFor(prompt []uint32, seed *int64, index int) uint64 {
	var s uint64
	if seed != nil {
		s = uint64(*seed) ^ 0x5bd1e9955bd1e995
	} else {
		s = 14695981039346656037 // FNV-1a offset basis over the prompt's token ids
		for _, t := range prompt {
			s ^= uint64(t)
			s *= 1099511628211
		}
	}
	return s + uint64(index)*0x9e3779b97f4a7c15
}

// Stats are cumulative counters of an engine rank, in vLLM's units.
type Stats struct {
	// PrefixQueries and PrefixHits count prompt tokens looked up in and found in the prefix
	// cache when requests are admitted (vllm:prefix_cache_queries_total / hits_total).
	PrefixQueries, PrefixHits      int64
	PromptTokens, GenerationTokens int64
	Preemptions                    int64
	Steps                          int64
}

// StepEvents are the KV events recorded since the last TakeEvents, in order. Digests[i] holds
// the full SHA-256 digests behind Events[i].Hashes and Parents[i] the parent's digest (zero when
// there is none), for publishers that send hashes as bytes. Media[i] are the media items of a
// BlockStored's request and Bases[i] the request's token index of the event's first block:
// block j of the event holds the items SpansIn(Media[i], Bases[i]+j·bs, Bases[i]+(j+1)·bs),
// whose hash Events[i].Extra carries (ExtraKeys; nil without media). All slices are reused by
// the next TakeEvents.
type StepEvents struct {
	Events  []indexer.Event
	Digests [][]BlockHash
	Parents []BlockHash
	Media   [][]indexer.ExtraSpan
	Bases   []int

	extraArena  []uint64
	hashArena   []uint64
	tokenArena  []uint32
	digestArena []BlockHash
}

func (s *StepEvents) reset() {
	s.Events, s.Digests, s.Parents, s.Media, s.Bases = s.Events[:0], s.Digests[:0], s.Parents[:0], s.Media[:0], s.Bases[:0]
	s.extraArena = s.extraArena[:0]
	s.hashArena, s.tokenArena, s.digestArena = s.hashArena[:0], s.tokenArena[:0], s.digestArena[:0]
}

// Len returns the number of events.
func (s *StepEvents) Len() int { return len(s.Events) }

func (s *StepEvents) addStored(digests []BlockHash, parent BlockHash, hasParent bool, tokens []uint32, bs int, media []indexer.ExtraSpan, base int) {
	h0, t0, d0 := len(s.hashArena), len(s.tokenArena), len(s.digestArena)
	var extra []uint64
	if len(indexer.SpansIn(media, base, base+len(digests)*bs)) > 0 {
		// Only an event whose blocks hold media carries extra keys (and its items).
		x0 := len(s.extraArena)
		s.extraArena = indexer.AppendSpanExtra(s.extraArena, spansFrom(media, base), bs, len(digests))
		extra = s.extraArena[x0:len(s.extraArena):len(s.extraArena)]
	} else {
		media = nil
	}
	for _, d := range digests {
		s.hashArena = append(s.hashArena, d.Fold())
	}
	s.digestArena = append(s.digestArena, digests...)
	s.tokenArena = append(s.tokenArena, tokens...)
	ev := indexer.Event{
		Kind:      indexer.EventStored,
		Hashes:    s.hashArena[h0:len(s.hashArena):len(s.hashArena)],
		HasParent: hasParent,
		Tokens:    s.tokenArena[t0:len(s.tokenArena):len(s.tokenArena)],
		BlockSize: bs,
		Medium:    "GPU",
		Extra:     extra,
	}
	if hasParent {
		ev.Parent = parent.Fold()
	} else {
		parent = BlockHash{}
	}
	s.Events = append(s.Events, ev)
	s.Digests = append(s.Digests, s.digestArena[d0:len(s.digestArena):len(s.digestArena)])
	s.Parents = append(s.Parents, parent)
	s.Media = append(s.Media, media)
	s.Bases = append(s.Bases, base)
}

// spansFrom returns spans with their ranges made relative to token base (the spans that end
// before it dropped); it allocates only when some span needs shifting.
func spansFrom(spans []indexer.ExtraSpan, base int) []indexer.ExtraSpan {
	if base == 0 {
		return spans
	}
	out := make([]indexer.ExtraSpan, 0, len(spans))
	for _, sp := range spans {
		if sp.End > base {
			out = append(out, indexer.ExtraSpan{Start: sp.Start - base, End: sp.End - base, Key: sp.Key})
		}
	}
	return out
}

// addRemoved records one BlockRemoved per hash, as vLLM does.
func (s *StepEvents) addRemoved(d BlockHash) {
	h0, d0 := len(s.hashArena), len(s.digestArena)
	s.hashArena = append(s.hashArena, d.Fold())
	s.digestArena = append(s.digestArena, d)
	s.Events = append(s.Events, indexer.Event{
		Kind:   indexer.EventRemoved,
		Hashes: s.hashArena[h0 : h0+1 : h0+1],
		Medium: "GPU",
	})
	s.Digests = append(s.Digests, s.digestArena[d0:d0+1:d0+1])
	s.Parents = append(s.Parents, BlockHash{})
	s.Media = append(s.Media, nil)
	s.Bases = append(s.Bases, 0)
}

func (s *StepEvents) addCleared() {
	s.Events = append(s.Events, indexer.Event{Kind: indexer.EventCleared})
	s.Digests = append(s.Digests, nil)
	s.Parents = append(s.Parents, BlockHash{})
	s.Media = append(s.Media, nil)
	s.Bases = append(s.Bases, 0)
}

// core is the engine model of one rank: the prefix-caching KV cache plus a vLLM-V1-style
// continuous-batching scheduler with chunked prefill. Time is simulated and passed in by the
// caller, so a test can run it to completion instantly and assert on simulated latencies; the
// Engine drives it against a (scaled) wall clock.
//
// A step is Schedule (pick the batch, allocate blocks, return its duration) followed, once
// that duration has passed, by Finish (mark tokens computed, cache the now-full blocks,
// sample one token for every sequence whose tokens are all computed). TTFT therefore emerges
// from queueing, the token budget, batch composition and cache hits: a request only
// prefills its uncached tokens.
//
// core is not safe for concurrent use; Engine serialises access.
type core struct {
	cfg   Config
	cache *cache
	root  BlockHash
	h     hasher

	waiting   []*Request
	running   []*Request
	scheduled []*Request
	updated   []*Request
	inStep    bool

	events  StepEvents
	spare   StepEvents
	evicted []BlockHash
	stats   Stats
	eos     map[uint32]struct{}
}

// newCore validates cfg (zero fields take defaults) and returns an idle core.
func newCore(cfg Config) (*core, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	kv, err := newCache(cfg.NumBlocks, cfg.BlockSize)
	if err != nil {
		return nil, err
	}
	eos := make(map[uint32]struct{}, len(cfg.EOSTokenIDs))
	for _, t := range cfg.EOSTokenIDs {
		eos[t] = struct{}{}
	}
	return &core{cfg: cfg, cache: kv, root: rootHash(cfg.HashSeed), eos: eos}, nil
}

// Config returns the effective configuration (defaults filled in).
func (c *core) Config() Config { return c.cfg }

// Cache returns the core's KV cache for inspection. Callers must not mutate it.
func (c *core) Cache() *cache { return c.cache }

// NumRunning and NumWaiting return the scheduler queue lengths.
func (c *core) NumRunning() int { return len(c.running) }

// NumWaiting returns the number of requests waiting to be admitted (including preempted ones).
func (c *core) NumWaiting() int { return len(c.waiting) }

// NextArrival returns the arrival time of the request at the head of the waiting queue.
func (c *core) NextArrival() (time.Duration, bool) {
	if len(c.waiting) == 0 {
		return 0, false
	}
	return c.waiting[0].Arrival, true
}

// Stats returns the cumulative counters.
func (c *core) Stats() Stats { return c.stats }

// Validate checks a request against the core's limits without queueing it.
func (c *core) Validate(r *Request) error {
	if len(r.Prompt) == 0 {
		return ErrEmptyPrompt
	}
	if r.MaxTokens < 1 {
		return fmt.Errorf("sim: max_tokens %d: %w", r.MaxTokens, ErrBadMaxTokens)
	}
	if len(r.Prompt)+r.MaxTokens > c.cfg.MaxModelLen {
		return fmt.Errorf("sim: %d prompt tokens + %d output tokens > %d: %w", len(r.Prompt), r.MaxTokens, c.cfg.MaxModelLen, ErrPromptTooLong)
	}
	if need := (len(r.Prompt) + r.MaxTokens + c.cfg.BlockSize - 1) / c.cfg.BlockSize; need > c.cfg.NumBlocks {
		return fmt.Errorf("sim: request needs %d blocks, cache has %d: %w", need, c.cfg.NumBlocks, ErrTooLarge)
	}
	return nil
}

// Add queues r, arriving at simulated time now. Requests must be added in arrival order;
// Schedule only admits those that arrived by its own time. The prompt's block digests are computed here unless
// prepareHashes already did.
func (c *core) Add(r *Request, now time.Duration) error {
	if err := c.Validate(r); err != nil {
		return err
	}
	if r.state != stateNew {
		return fmt.Errorf("sim: add %s: request reused: %w", r.ID, ErrBadConfig)
	}
	if r.tokens == nil {
		r.tokens = make([]uint32, len(r.Prompt), len(r.Prompt)+min(r.MaxTokens, 4096))
		copy(r.tokens, r.Prompt)
	}
	r.hashes = c.h.appendChain(r.hashes, c.root, r.tokens, c.cfg.BlockSize, r.Media)
	r.rng = r.Seed
	r.remote = min(max(r.RemoteTokens, 0), len(r.Prompt)-1)
	r.Arrival = now
	r.state = stateWaiting
	c.waiting = append(c.waiting, r)
	return nil
}

// prepareHashes computes r's prompt digests with h's scratch buffer so that the cost can be
// paid outside the engine lock. cfg must be the engine's effective config.
func prepareHashes(r *Request, cfg Config, h *hasher) {
	cfg = cfg.withDefaults()
	if r.tokens == nil {
		r.tokens = make([]uint32, len(r.Prompt), len(r.Prompt)+min(max(r.MaxTokens, 0), 4096))
		copy(r.tokens, r.Prompt)
	}
	r.hashes = h.appendChain(r.hashes, rootHash(cfg.HashSeed), r.tokens, cfg.BlockSize, r.Media)
}

// Abort removes r from the engine and releases its blocks. It returns false when r already
// finished. Safe to call between Schedule and Finish: an aborted request is skipped by Finish.
func (c *core) Abort(r *Request) bool {
	switch r.state {
	case stateWaiting:
		if i := slices.Index(c.waiting, r); i >= 0 {
			c.waiting = slices.Delete(c.waiting, i, i+1)
		}
	case stateRunning:
		if i := slices.Index(c.running, r); i >= 0 {
			c.running = slices.Delete(c.running, i, i+1)
		}
		c.cache.Release(r.blocks)
		r.blocks = r.blocks[:0]
	default:
		return false
	}
	r.state = stateAborted
	r.FinishReason = "abort"
	return true
}

// ReleaseHeld releases the blocks a finished HoldKV request kept; it reports whether there
// were any (a second call, or one for a request that did not finish, does nothing).
func (c *core) ReleaseHeld(r *Request) bool {
	if r.state != stateFinished || len(r.blocks) == 0 {
		return false
	}
	c.cache.Release(r.blocks)
	r.blocks = r.blocks[:0]
	c.drainEvicted()
	return true
}

// ResetPrefixCache forgets every cached block and records one AllBlocksCleared event, like
// vLLM's /reset_prefix_cache. It fails (returns false) while requests are running.
func (c *core) ResetPrefixCache() bool {
	if len(c.running) > 0 || c.inStep || !c.cache.Reset() {
		return false
	}
	c.drainEvicted()
	c.events.addCleared()
	return true
}

// Schedule plans the next step at simulated time now and returns its duration; ok is false
// when there is nothing to run. Every Schedule that returns ok must be followed by Finish.
func (c *core) Schedule(now time.Duration) (d time.Duration, ok bool) {
	budget := c.cfg.MaxBatchedTokens
	c.scheduled = c.scheduled[:0]
	prefill, preempted := c.scheduleRunning(&budget)
	if !preempted { // a step that had to preempt admits nothing
		prefill += c.admitWaiting(now, &budget)
	}
	c.drainEvicted()
	if len(c.scheduled) == 0 {
		return 0, false
	}
	c.inStep = true
	c.stats.Steps++
	d = c.cfg.StepOverhead + time.Duration(prefill)*c.cfg.PrefillPerToken + time.Duration(len(c.scheduled))*c.cfg.DecodePerSeq
	return d, true
}

// scheduleRunning schedules the running requests first, in admission order, within budget;
// allocation failures preempt from the back (vLLM's recompute preemption), possibly the request
// itself. It returns the prefill tokens scheduled and whether anything was preempted.
func (c *core) scheduleRunning(budget *int) (prefill int, preempted bool) {
	bs := c.cfg.BlockSize
	for i := 0; i < len(c.running) && *budget > 0; i++ {
		r := c.running[i]
		n := min(len(r.tokens)-r.numComputed, *budget)
		self := false
		for {
			want := ceilDiv(r.numComputed+n, bs) - len(r.blocks)
			if want <= 0 {
				break
			}
			var ok bool
			if r.blocks, ok = c.cache.Allocate(r.blocks, want); ok {
				break
			}
			victim := c.running[len(c.running)-1]
			c.running = c.running[:len(c.running)-1]
			c.preempt(victim)
			preempted = true
			if victim == r {
				self = true
				break
			}
		}
		if self {
			break
		}
		r.numNew = n
		*budget -= n
		if !(n == 1 && r.numOutput > 0 && r.numComputed == len(r.tokens)-1) {
			prefill += n
		}
		c.scheduled = append(c.scheduled, r)
	}
	return prefill, preempted
}

// admitWaiting admits waiting requests that have arrived by now while there is room and
// budget, crediting their cached prefix; it returns the prefill tokens scheduled.
func (c *core) admitWaiting(now time.Duration, budget *int) (prefill int) {
	bs := c.cfg.BlockSize
	for len(c.waiting) > 0 && len(c.running) < c.cfg.MaxRunning && *budget > 0 {
		r := c.waiting[0]
		if r.Arrival > now {
			break // not arrived yet at the scheduler's time (arrivals are queued in order)
		}
		maxHit := min((len(r.tokens)-1)/bs, len(r.hashes))
		hit := c.cache.Match(r.hashes[:maxHit])
		cached := hit * bs
		remote := max(r.remote-cached, 0) // transferred, not computed: no budget, no prefill cost
		n := remote + min(len(r.tokens)-cached-remote, *budget)
		fresh := ceilDiv(cached+n, bs) - hit
		var ok bool
		if r.blocks, ok = c.cache.Acquire(r.blocks[:0], r.hashes[:hit], fresh); !ok {
			break // head-of-line: wait for blocks to free up
		}
		c.waiting = c.waiting[1:]
		r.state = stateRunning
		r.numComputed, r.numCommitted = cached, hit
		if !r.scheduled {
			r.scheduled = true
			r.CachedTokens = cached
			c.stats.PrefixQueries += int64(len(r.Prompt))
			c.stats.PrefixHits += int64(min(cached, len(r.Prompt)))
			c.stats.PromptTokens += int64(len(r.Prompt))
		}
		c.running = append(c.running, r)
		r.numNew = n
		*budget -= n - remote
		prefill += n - remote
		c.scheduled = append(c.scheduled, r)
	}
	return prefill
}

// Finish completes the step planned by the last Schedule at simulated time now. It returns
// the requests that received an output token in this step (finished ones included, with
// FinishReason set); the slice is reused by the next call.
func (c *core) Finish(now time.Duration) []*Request {
	c.updated = c.updated[:0]
	if !c.inStep {
		return c.updated
	}
	c.inStep = false
	bs := c.cfg.BlockSize
	done := false
	for _, r := range c.scheduled {
		if r.state != stateRunning {
			continue // aborted during the step
		}
		r.numComputed += r.numNew
		r.numNew = 0
		c.commit(r, bs)
		if r.numComputed < len(r.tokens) {
			continue // chunked prefill continues next step
		}
		var tok uint32
		if r.numOutput < len(r.Script) {
			tok = r.Script[r.numOutput]
		} else {
			tok = c.sample(r)
		}
		r.tokens = append(r.tokens, tok)
		r.numOutput++
		c.stats.GenerationTokens++
		if r.numOutput == 1 {
			r.FirstToken = now
		}
		// vLLM's check_stop, with the script's end as the model's EOS.
		switch {
		case r.numOutput < r.MinTokens && r.numOutput < r.MaxTokens:
		case r.Script != nil && !r.IgnoreEOS && r.numOutput >= len(r.Script):
			r.FinishReason = "stop"
		case slices.Contains(r.StopTokenIDs, tok):
			r.FinishReason = "stop"
		case r.numOutput >= r.MaxTokens:
			r.FinishReason = "length"
		}
		if r.FinishReason != "" {
			r.state = stateFinished
			r.Done = now
			if !r.HoldKV {
				c.cache.Release(r.blocks)
				r.blocks = r.blocks[:0]
			}
			done = true
		}
		c.updated = append(c.updated, r)
	}
	if done {
		c.running = slices.DeleteFunc(c.running, func(r *Request) bool { return r.state != stateRunning })
	}
	c.scheduled = c.scheduled[:0]
	c.drainEvicted()
	return c.updated
}

// commit offers r's newly full blocks to the prefix cache and records BlockStored events for
// the ones that became cached, one event per contiguous run.
func (c *core) commit(r *Request, bs int) {
	full := r.numComputed / bs
	if full <= r.numCommitted {
		return
	}
	r.hashes = c.h.appendChain(r.hashes, c.root, r.tokens[:full*bs], bs, r.Media)
	start := -1
	flush := func(end int) {
		if start < 0 {
			return
		}
		var parent BlockHash
		if start > 0 {
			parent = r.hashes[start-1]
		}
		c.events.addStored(r.hashes[start:end], parent, start > 0, r.tokens[start*bs:end*bs], bs, r.Media, start*bs)
		start = -1
	}
	for i := r.numCommitted; i < full; i++ {
		if c.cache.Commit(r.blocks[i], r.hashes[i]) {
			if start < 0 {
				start = i
			}
		} else {
			flush(i)
		}
	}
	flush(full)
	r.numCommitted = full
}

func (c *core) preempt(r *Request) {
	c.cache.Release(r.blocks)
	r.blocks = r.blocks[:0]
	r.remote = 0
	r.numComputed, r.numCommitted, r.numNew = 0, 0, 0
	r.state = stateWaiting
	c.waiting = slices.Insert(c.waiting, 0, r)
	c.stats.Preemptions++
}

func (c *core) drainEvicted() {
	c.evicted = c.cache.TakeEvicted(c.evicted[:0])
	for _, h := range c.evicted {
		c.events.addRemoved(h)
	}
}

// TakeEvents returns the events recorded since the previous call (evictions while
// scheduling, stores when steps finish, clears). The result is valid until the next
// TakeEvents, ResetPrefixCache, Schedule or Finish call.
func (c *core) TakeEvents() *StepEvents {
	// Double-buffered: the caller reads spare while new events go into the other buffer.
	c.events, c.spare = c.spare, c.events
	c.events.reset()
	return &c.spare
}

// AppendCached appends the folded hash of every cached block.
func (c *core) AppendCached(dst []uint64) []uint64 { return c.cache.AppendCached(dst) }

// sample draws the next output token: a splitmix64 stream seeded per request, mapped into the
// vocabulary and skipping EOS ids, and the request's stop token ids while it is short of
// MinTokens (vLLM's min-tokens logits processor masks them).
func (c *core) sample(r *Request) uint32 {
	maskStops := r.numOutput < r.MinTokens && len(r.StopTokenIDs) > 0 && len(r.StopTokenIDs)+len(c.eos) < c.cfg.VocabSize
	for {
		r.rng += 0x9e3779b97f4a7c15
		z := r.rng
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		tok := uint32(z % uint64(c.cfg.VocabSize))
		if _, bad := c.eos[tok]; bad {
			continue
		}
		if maskStops && slices.Contains(r.StopTokenIDs, tok) {
			continue
		}
		return tok
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
