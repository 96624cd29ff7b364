package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/router"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// abortGrace bounds how long, after the drain deadline, handlers may take to send their
// shutdown error before the remaining connections are closed.
const abortGrace = time.Second

// listening receives the bound API and metrics addresses once both listeners are up (tests use
// it with --port 0); nil is fine.
type listening func(api, metrics net.Addr)

// serve builds the gateway from o and runs it until ctx is done, then shuts down gracefully:
// it stops accepting, lets in-flight requests and streams finish within DrainTimeout, stops the
// router's background work and returns nil.
func serve(ctx context.Context, o options, stderr io.Writer, up listening) error {
	log, err := newLogger(o.LogLevel, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	reg := prometheus.NewRegistry()
	// The default Go metrics plus the heap the last GC found live (go_gc_heap_live_bytes): the
	// memory the gateway retains, which heap_inuse only bounds from above.
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	raiseZMQSocketLimit(log)
	rcfg, err := buildRouterConfig(o, log, reg)
	if err != nil {
		return err
	}
	rt, err := router.New(rcfg)
	if err != nil {
		return err
	}
	for _, w := range o.Workers {
		if _, err := rt.AddWorker(w.Spec); err != nil {
			return fmt.Errorf("gateway: worker %s: %w", w.URL, err)
		}
	}
	if len(o.Workers) == 0 {
		log.Warn("no workers configured; add them with POST /workers")
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
	if err != nil {
		return fmt.Errorf("gateway: listen: %w", err)
	}
	var mln net.Listener
	if o.PrometheusPort >= 0 {
		if mln, err = net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.PrometheusPort))); err != nil {
			ln.Close()
			return fmt.Errorf("gateway: listen metrics: %w", err)
		}
	}
	errLog := zap.NewStdLog(log.Named("http"))
	api := &http.Server{
		Handler:           rt.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second, // the whole request body; responses stream without a write timeout
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          errLog,
	}
	var msrv *http.Server
	if mln != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: errLog}))
		msrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second, ErrorLog: errLog}
	}
	var maddr net.Addr
	if mln != nil {
		maddr = mln.Addr()
	}
	log.Info("gateway listening", zap.Stringer("api", ln.Addr()), zap.Any("metrics", maddr),
		zap.String("policy", o.Policy), zap.String("kv_index", o.KVIndex), zap.String("model", rcfg.Model), zap.Int("workers", len(o.Workers)))
	if up != nil {
		up(ln.Addr(), maddr)
	}

	rctx, stopRouter := context.WithCancel(context.Background())
	defer stopRouter()
	var g errgroup.Group
	g.Go(func() error { return rt.Run(rctx) })
	serveErr := make(chan error, 2)
	g.Go(func() error {
		if err := api.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("gateway: serve: %w", err)
		}
		return nil
	})
	if msrv != nil {
		g.Go(func() error {
			if err := msrv.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("gateway: serve metrics: %w", err)
			}
			return nil
		})
	}

	var failed error
	select {
	case <-ctx.Done():
		log.Info("shutting down: draining in-flight requests", zap.Duration("deadline", o.DrainTimeout))
	case failed = <-serveErr:
		log.Error("listener failed; shutting down", zap.Error(failed))
	}
	dctx, cancel := context.WithTimeout(context.Background(), o.DrainTimeout)
	defer cancel()
	if err := api.Shutdown(dctx); err != nil {
		// Streams still running get an OpenAI error event (gateway_shutting_down) rather than
		// a bare disconnect; a short grace lets the handlers write it before the connections go.
		log.Warn("drain deadline passed; ending in-flight requests with an error", zap.Error(err))
		rt.AbortInFlight()
		gctx, gcancel := context.WithTimeout(context.Background(), abortGrace)
		if err := api.Shutdown(gctx); err != nil {
			_ = api.Close()
		}
		gcancel()
	}
	if msrv != nil {
		_ = msrv.Close()
	}
	stopRouter()
	if err := g.Wait(); err != nil && failed == nil {
		failed = err
	}
	log.Info("gateway stopped")
	return failed
}

// buildRouterConfig turns options into the router's configuration: tokenizer, index, tree,
// pending overlay, policy and metrics.
func buildRouterConfig(o options, log *zap.Logger, reg prometheus.Registerer) (router.Config, error) {
	cfg := router.Config{
		Model:                 o.Model,
		KVIndex:               o.KVIndex,
		BlockSize:             o.BlockSize,
		ForwardTokenIDs:       o.ForwardTokenIDs,
		AdminToken:            o.AdminToken,
		MaxPromptTokens:       o.MaxPromptTokens,
		MaxBodyBytes:          o.MaxBodyBytes,
		MaxN:                  o.MaxN,
		MaxInFlightPerWorker:  o.MaxInFlightPerWorker,
		HealthInterval:        o.HealthInterval,
		HealthTimeout:         o.HealthTimeout,
		EngineMetricsInterval: o.EngineMetricsInterval,
		UpstreamTimeout:       o.UpstreamTimeout,
		KVListen:              o.KVListen,
		Logger:                log,
		Registerer:            reg,
	}
	switch {
	case o.ModelPath != "":
		t, err := tokenizer.LoadDir(o.ModelPath)
		if err != nil {
			return cfg, fmt.Errorf("gateway: --model-path: %w", err)
		}
		cfg.Tokenizer = router.FromTokenizer(t)
		if cfg.Model == "" {
			cfg.Model = filepath.Base(filepath.Clean(o.ModelPath))
		}
	case o.Tokenizer != "":
		t, err := tokenizer.LoadFile(o.Tokenizer)
		if err != nil {
			return cfg, fmt.Errorf("gateway: --tokenizer: %w", err)
		}
		cfg.Tokenizer = router.FromTokenizer(t)
	default:
		log.Warn("no tokenizer (--model-path/--tokenizer): text prompts are routed without prefix information")
	}
	pc := policy.DefaultConfig()
	pc.CacheThreshold = o.CacheThreshold
	pc.BalanceAbsThreshold = o.BalanceAbsThreshold
	pc.BalanceRelThreshold = o.BalanceRelThreshold
	pc.BoundedLoadFactor = o.BoundedLoadFactor
	pc.PrefillWeight = o.PrefillWeight
	pc.QueueWeight = o.QueueWeight
	pc.DecodeWeight = o.DecodeWeight
	pc.Temperature = o.Temperature
	p, err := policy.New(o.Policy, pc)
	if err != nil {
		return cfg, fmt.Errorf("gateway: --policy: %w", err)
	}
	cfg.Policy = p
	idx, err := indexer.New(indexer.Config{MaxBlocks: o.IndexMaxBlocks})
	if err != nil {
		return cfg, fmt.Errorf("gateway: index: %w", err)
	}
	cfg.Index = idx
	tree, err := indexer.NewTree(indexer.TreeConfig{BlockSize: o.BlockSize, MaxBlocksPerWorker: o.TreeMaxBlocks, TTL: o.TreeTTL})
	if err != nil {
		return cfg, fmt.Errorf("gateway: tree: %w", err)
	}
	cfg.Tree = tree
	pend, err := indexer.NewPending(indexer.PendingConfig{TTL: o.PendingTTL})
	if err != nil {
		return cfg, fmt.Errorf("gateway: pending: %w", err)
	}
	cfg.Pending = pend
	km, err := kvbridge.NewMetrics(reg)
	if err != nil {
		return cfg, err
	}
	cfg.KVMetrics = km
	return cfg, nil
}

func newLogger(level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("gateway: --log-level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	enc.EncodeDuration = zapcore.StringDurationEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core), nil
}
