package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/fleet"
)

// This file builds and runs a Pipeline (config.go): it stands above every other file of the
// package (New wires the pools, the admission queues and the metrics the others use).

// New validates cfg and returns a Pipeline with no workers. It starts no goroutines.
func New(cfg Config) (*Pipeline, error) {
	if len(cfg.Models) == 0 {
		return nil, errors.New("router: new: a model is required")
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxN == 0 {
		cfg.MaxN = DefaultMaxN
	}
	if cfg.MaxPrompts == 0 {
		cfg.MaxPrompts = DefaultMaxPrompts
	}
	if cfg.MaxBodyBytes < 0 || cfg.MaxN < 0 || cfg.MaxPrompts < 0 || cfg.MaxPromptTokens < 0 || cfg.MaxInFlightPerWorker < 0 || cfg.UpstreamTimeout < 0 ||
		cfg.Queue.Max < 0 || cfg.Queue.Timeout < 0 || cfg.Queue.MaxWait < 0 || cfg.Queue.LookAhead < 0 || cfg.Queue.MaxWaitingPerWorker < 0 || cfg.Queue.Reserve < 0 {
		return nil, errors.New("router: new: limits and timeouts must not be negative")
	}
	if cfg.Queue.Max > 0 && cfg.MaxInFlightPerWorker == 0 {
		return nil, errors.New("router: new: an admission queue needs a per-worker in-flight limit to wait for")
	}
	if cfg.Queue.MaxWaitingPerWorker > 0 && (cfg.Queue.Max == 0 || cfg.Fleet.EngineMetricsInterval == 0) {
		return nil, errors.New("router: new: a per-worker bound on the engine's waiting requests needs the admission queue and engine-load scrapes")
	}
	if cfg.Queue.Reserve > 0 && (cfg.Queue.Max == 0 || cfg.Queue.Reserve >= cfg.MaxInFlightPerWorker) {
		return nil, errors.New("router: new: reserved slots need the admission queue and must be fewer than the per-worker in-flight limit")
	}
	if cfg.Queue.Timeout == 0 {
		cfg.Queue.Timeout = DefaultQueueTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Fleet.Logger, cfg.Fleet.Registerer, cfg.Fleet.Now = cfg.Logger, cfg.Registerer, cfg.Now
	pools := make([]fleet.PoolConfig, len(cfg.Models))
	for i, m := range cfg.Models {
		pc, err := poolConfig(m, cfg)
		if err != nil {
			return nil, err
		}
		pools[i] = pc
	}
	fl, err := fleet.New(cfg.Fleet, pools)
	if err != nil {
		return nil, err
	}
	pl := &Pipeline{cfg: cfg, log: cfg.Logger, now: cfg.Now, fleet: fl, rand: rand.Uint64, loadMaxAge: 3 * cfg.Fleet.EngineMetricsInterval}
	pl.aborted, pl.abort = context.WithCancelCause(context.Background())
	if cfg.Tracing != nil {
		pl.tracer = cfg.Tracing.Tracer(tracerName)
	}
	if pl.met, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	return pl, nil
}

// Run runs the fleet's background work (health checks, event streams, engine-load scrapes)
// and, with a queue configured, the periodic offer of free slots to the admission queues,
// until ctx is done, and returns when it has stopped. Run must be called at most once.
func (pl *Pipeline) Run(ctx context.Context) error {
	pl.log.Info("router running", zap.Int("workers", len(pl.fleet.Snapshot().Members())), zap.String("policy", policyName(pl.defaultModel().policy)),
		zap.String("kv_index", pl.fleet.KVIndex()), zap.Strings("models", pl.fleet.PoolNames()))
	if pl.cfg.Queue.Max == 0 {
		return pl.fleet.Run(ctx)
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		pl.kickLoop(ctx)
	}()
	err := pl.fleet.Run(ctx)
	cancel()
	wg.Wait()
	return err
}

// SetModel adds a model while serving, or replaces the one of that name: the new pool starts
// with an empty index, and the workers of the old one, like those whose spec names the model
// and were served by the default pool, drain and start again in it. Requests waiting in the
// old pool's admission queue are answered 503 model_reconfigured with Retry-After (see
// closeReplaced). It fails, changing nothing, for an invalid model, the default model's name,
// or a worker that cannot be rebuilt.
func (pl *Pipeline) SetModel(m Model) error {
	pc, err := poolConfig(m, pl.cfg)
	if err != nil {
		return err
	}
	pl.poolsMu.Lock()
	defer pl.poolsMu.Unlock()
	before := pl.fleet.Snapshot()
	if err := pl.fleet.SetPool(pc); err != nil {
		return err
	}
	closeReplaced(before, pl.fleet.Snapshot())
	return nil
}

// RemoveModel stops serving a model other than the default: its workers drain, and any whose
// spec still names it starts again in the default pool; requests waiting in its admission
// queue are answered 503 model_reconfigured. It fails for a model that is not configured.
func (pl *Pipeline) RemoveModel(name string) error {
	pl.poolsMu.Lock()
	defer pl.poolsMu.Unlock()
	before := pl.fleet.Snapshot()
	if err := pl.fleet.RemovePool(name); err != nil {
		return err
	}
	closeReplaced(before, pl.fleet.Snapshot())
	return nil
}

// closeReplaced closes the admission queues of before's pools that after no longer has. Their
// waiting requests were prepared (tokenized, rendered) with the old model's configuration, and
// their hand-offs would come from the old pool's workers, which drain: moved to the new queue
// they would route on token ids the new tokenizer or template may not produce, and left in the
// old one they would wait for their whole timeout. So they are refused at once with a
// retryable 503 (the SDKs retry it, honouring Retry-After) and the retry is prepared for the
// new pool. A request that resolved to the old pool and enqueues after this gets the same
// answer (a closed queue refuses).
func closeReplaced(before, after *fleet.Snapshot) {
	kept := after.Pools()
	for _, p := range before.Pools() {
		if slices.Contains(kept, p) {
			continue
		}
		if q := modelOf(p).queue; q != nil {
			q.Close()
		}
	}
}

// AbortInFlight ends every request still running, for a shutdown whose drain deadline has
// passed: a stream that has started gets one OpenAI error event (code gateway_shutting_down)
// and ends; a request not answered yet gets a 503 with that code; new requests fail the same
// way. Safe for concurrent use; later calls do nothing.
func (pl *Pipeline) AbortInFlight() { pl.abort(errShutdown) }

// defaultModel returns the pipeline's state of the default model.
func (pl *Pipeline) defaultModel() *Served { return modelOf(pl.fleet.Snapshot().DefaultPool()) }

// poolConfig validates m and returns its pool's configuration, the pipeline's state inside,
// with its admission queue as cfg configures it.
func poolConfig(m Model, cfg Config) (fleet.PoolConfig, error) {
	if m.Policy == nil {
		return fleet.PoolConfig{}, fmt.Errorf("router: model %q: a policy is required", m.Name)
	}
	pd, err := newPDState(m.PD, m.Policy)
	if err != nil {
		return fleet.PoolConfig{}, fmt.Errorf("router: model %q: %w", m.Name, err)
	}
	q, err := newQueue(cfg)
	if err != nil {
		return fleet.PoolConfig{}, fmt.Errorf("router: model %q: %w", m.Name, err)
	}
	return fleet.PoolConfig{Name: m.Name, BlockSize: m.BlockSize, Index: m.Index, Tree: m.Tree, Pending: m.Pending, Decoder: m.Tokenizer,
		Routing: &Served{Tok: m.Tokenizer, Chat: m.Chat, Parsers: m.ChatParsers, ReasoningField: m.ReasoningField, policy: m.Policy, pd: pd, queue: q}}, nil
}
