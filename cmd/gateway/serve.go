package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"

	"github.com/kvgate/kvgate/pkg/clientauth"
	"github.com/kvgate/kvgate/pkg/discovery"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/router"
)

// abortGrace bounds how long, after the drain deadline, handlers may take to send their
// shutdown error before the remaining connections are closed.
const abortGrace = time.Second

// hooks connect serve to its caller: up receives the bound addresses once every listener is up
// (tests use it with port 0); reload delivers the signals that re-read --api-key-file and the
// --config file (SIGHUP). Both may be nil.
type hooks struct {
	up     func(boundAddrs)
	reload <-chan os.Signal
}

// boundAddrs are the listeners' addresses; Admin and Metrics are nil when disabled.
type boundAddrs struct {
	API, Admin, Metrics net.Addr
}

// serve builds the gateway from o and runs it until ctx is done, then shuts down gracefully:
// it stops accepting, lets in-flight requests and streams finish within DrainTimeout, stops the
// router's background work and returns nil.
func serve(ctx context.Context, o options, stderr io.Writer, h hooks) error {
	g, err := build(o, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = g.log.Sync() }()
	defer g.closeResponses()
	defer g.stopTracing() // after the drain: the last requests' spans are flushed
	lns, err := listen(o)
	if err != nil {
		return err
	}
	servers := g.servers(lns)
	addrs := lns.addrs()
	g.log.Info("gateway listening", zap.Stringer("api", addrs.API), zap.Any("admin", addrs.Admin), zap.Any("metrics", addrs.Metrics),
		zap.String("policy", o.Policy), zap.String("kv_index", o.KVIndex), zap.String("model", g.defaultModel), zap.Int("workers", len(o.Workers)),
		zap.Strings("client_keys", g.clients.KeyNames()), zap.Bool("admin_token", o.AdminToken != ""), zap.String("responses_store", o.storeName()))
	warnExposure(g.log, o, addrs, g.clients.KeyNames())
	var cw *fsnotify.Watcher
	if path := configPath(o); path != "" {
		if cw, err = newConfigWatch(path); err != nil {
			g.log.Warn("the config file is not watched; SIGHUP reloads it", zap.Error(err))
		}
	}
	if h.up != nil {
		h.up(addrs)
	}

	rctx, stopRouter := context.WithCancel(context.Background())
	defer stopRouter()
	var eg errgroup.Group
	eg.Go(func() error { return g.rt.Run(rctx) })
	eg.Go(func() error { return g.discovery.Run(rctx) })
	changed := make(chan struct{}, 1)
	if cw != nil {
		eg.Go(func() error { watchConfig(rctx, cw, changed, g.log); return nil })
	}
	serveErr := make(chan error, len(servers))
	for _, s := range servers {
		eg.Go(func() error {
			if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("gateway: serve %s: %w", s.name, err)
			}
			return nil
		})
	}

	failed := g.waitForStop(ctx, o, serveErr, h.reload, changed)
	drain(o.DrainTimeout, servers[0].srv, g.rt, g.log)
	for _, s := range servers[1:] {
		_ = s.srv.Close()
	}
	stopRouter()
	if err := eg.Wait(); err != nil && failed == nil {
		failed = err
	}
	g.log.Info("gateway stopped")
	return failed
}

// gateway is what serve runs: the router (with its fleet), the client guard, the DNS discovery
// feeding the fleet and the config reloader, with their logger and metrics registry.
type gateway struct {
	log       *zap.Logger
	reg       *prometheus.Registry
	rt        *router.Router
	clients   *clientauth.Guard
	discovery *discovery.Watcher
	reloader  *reloader
	// defaultModel is the default model's configured name ("" when its workers report it).
	defaultModel string
	// closeResponses releases the Responses store (a Redis client's connections).
	closeResponses func()
	// stopTracing flushes and stops the trace exporter (tracing.go).
	stopTracing func()
}

// build wires the gateway of o: logger, metrics, every model, the router, the client guard,
// discovery and the reloader, and puts the configured workers in force. It starts nothing.
func build(o options, stderr io.Writer) (*gateway, error) {
	log, err := newLogger(o.LogLevel, stderr)
	if err != nil {
		return nil, err
	}
	g := &gateway{log: log, reg: prometheus.NewRegistry()}
	// The default Go metrics plus the heap the last GC found live (go_gc_heap_live_bytes): the
	// memory the gateway retains, which heap_inuse only bounds from above.
	g.reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	raiseZMQSocketLimit(log)
	if g.clients, err = newClientGuard(o, g.reg); err != nil {
		return nil, err
	}
	rcfg, err := buildRouterConfig(o, log, g.reg)
	if err != nil {
		return nil, err
	}
	rcfg.Clients, g.defaultModel = g.clients, rcfg.Models[0].Name
	if o.AccessLog == "on" {
		// Its own core at info, whatever --log-level says: the access log is not a debug aid.
		access, err := newLogger("info", stderr)
		if err != nil {
			return nil, err
		}
		rcfg.AccessLog = access.Named("access")
	}
	tp, stopTracing, err := newTracing(&o, log, g.reg)
	if err != nil {
		return nil, err
	}
	g.stopTracing = stopTracing
	if tp != nil {
		rcfg.Tracing = tp
	}
	if rcfg.Responses, g.closeResponses, err = o.buildResponses(g.reg); err != nil {
		return nil, err
	}
	if g.rt, err = router.New(rcfg); err != nil {
		return nil, err
	}
	if g.discovery, err = newDiscovery(o, g.rt.Fleet(), log, g.reg); err != nil {
		return nil, err
	}
	if g.reloader, err = newReloader(g.rt, g.discovery, o, log, g.reg); err != nil {
		return nil, err
	}
	if err := g.reloader.apply(o); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if len(o.allWorkers()) == 0 && len(o.discoverSpecs()) == 0 {
		log.Warn("no workers configured; add them with POST /workers on the admin listener")
	}
	return g, nil
}

// servers returns the gateway's HTTP servers on their listeners: the API first, then the
// admin and metrics servers when their listeners are enabled.
func (g *gateway) servers(lns listeners) []namedServer {
	errLog := zap.NewStdLog(g.log.Named("http"))
	api := &http.Server{
		Handler:           g.rt.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second, // the whole request body; responses stream without a write timeout
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          errLog,
	}
	// The admin and metrics servers answer small requests quickly: every timeout is short.
	side := func(hd http.Handler) *http.Server {
		return &http.Server{Handler: hd, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
			IdleTimeout: 120 * time.Second, MaxHeaderBytes: 1 << 20, ErrorLog: errLog}
	}
	servers := []namedServer{{"api", api, lns.api}}
	if lns.admin != nil {
		servers = append(servers, namedServer{"admin", side(g.rt.AdminHandler()), lns.admin})
	}
	if lns.metrics != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{ErrorLog: errLog}))
		servers = append(servers, namedServer{"metrics", side(mux), lns.metrics})
	}
	return servers
}

// namedServer is one of the gateway's HTTP servers and its listener.
type namedServer struct {
	name string
	srv  *http.Server
	ln   net.Listener
}

// listeners are the gateway's bound sockets; admin and metrics are nil when disabled.
type listeners struct {
	api, admin, metrics net.Listener
}

func (l listeners) addrs() boundAddrs {
	a := boundAddrs{API: l.api.Addr()}
	if l.admin != nil {
		a.Admin = l.admin.Addr()
	}
	if l.metrics != nil {
		a.Metrics = l.metrics.Addr()
	}
	return a
}

// listen binds the API, admin and metrics listeners. The admin listener must be loopback-only
// unless an admin token is set: whoever reaches it can add a worker and so receive every
// prompt (DESIGN.md §11). The check is on the bound address, so a host name is judged by what
// it resolved to.
func listen(o options) (l listeners, err error) {
	defer func() {
		if err != nil {
			for _, ln := range []net.Listener{l.api, l.admin, l.metrics} {
				if ln != nil {
					ln.Close()
				}
			}
		}
	}()
	if l.api, err = net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port))); err != nil {
		return l, fmt.Errorf("gateway: listen: %w", err)
	}
	if o.AdminPort >= 0 {
		if l.admin, err = net.Listen("tcp", net.JoinHostPort(o.AdminHost, strconv.Itoa(o.AdminPort))); err != nil {
			return l, fmt.Errorf("gateway: listen admin: %w", err)
		}
		if !isLoopback(l.admin.Addr()) && o.AdminToken == "" {
			return l, fmt.Errorf("gateway: the admin listener on %s is not loopback-only and has no --admin-token: anyone who reaches it "+
				"could add a worker and receive every prompt. Set --admin-token (or $KVGATE_ADMIN_TOKEN), bind --admin-host=127.0.0.1, "+
				"or disable it with --admin-port=-1", l.admin.Addr())
		}
	}
	if o.PrometheusPort >= 0 {
		if l.metrics, err = net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.PrometheusPort))); err != nil {
			return l, fmt.Errorf("gateway: listen metrics: %w", err)
		}
	}
	return l, nil
}

// isLoopback reports whether a bound address accepts loopback connections only.
func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// warnExposure logs what the configuration leaves open to whoever reaches the API listener.
func warnExposure(log *zap.Logger, o options, a boundAddrs, keys []string) {
	if len(keys) == 0 && !isLoopback(a.API) {
		log.Warn("the API listens beyond loopback without --api-key: anyone who reaches it can send requests", zap.Stringer("api", a.API))
	}
}

// waitForStop returns when ctx is done (nil) or a listener failed (its error), reloading the
// client keys and the config file on every reload signal, and the config file when it changed,
// meanwhile.
func (g *gateway) waitForStop(ctx context.Context, o options, serveErr <-chan error, reload <-chan os.Signal, changed <-chan struct{}) error {
	for {
		select {
		case <-ctx.Done():
			g.log.Info("shutting down: draining in-flight requests", zap.Duration("deadline", o.DrainTimeout))
			return nil
		case err := <-serveErr:
			g.log.Error("listener failed; shutting down", zap.Error(err))
			return err
		case <-reload:
			reloadKeys(o, g.clients, g.log)
			g.reloader.reload(true, "SIGHUP")
		case <-changed:
			g.reloader.reload(false, "file changed")
		}
	}
}

// newDiscovery builds the DNS discovery of --discover (and of the config file's discover
// specs, now or after a reload), resolving through --dns-server when given; its answers become
// the fleet's workers of origin "dns NAME".
func newDiscovery(o options, fl *fleet.Fleet, log *zap.Logger, reg prometheus.Registerer) (*discovery.Watcher, error) {
	cfg := discovery.Config{Interval: o.DiscoverInterval, Logger: log.Named("discovery"), Registerer: reg}
	if o.DNSServer != "" {
		r, err := discovery.NewResolver(o.DNSServer)
		if err != nil {
			return nil, fmt.Errorf("gateway: --dns-server: %w", err)
		}
		cfg.Resolver = r
	}
	w, err := discovery.New(cfg, fl.SyncWorkers)
	if err != nil {
		return nil, fmt.Errorf("gateway: discovery: %w", err)
	}
	return w, nil
}

// reloadKeys re-reads --api-key-file and swaps the client keys; on any error the keys in force
// stay.
func reloadKeys(o options, clients *clientauth.Guard, log *zap.Logger) {
	if o.APIKeyFile == "" {
		log.Info("reload signal: no --api-key-file to re-read")
		return
	}
	ks, err := loadClientKeys(o)
	if err == nil {
		err = clients.SetKeys(ks)
	}
	if err != nil {
		log.Error("client keys not reloaded; the keys in force stay", zap.Error(err))
		return
	}
	log.Info("client keys reloaded", zap.Strings("client_keys", ks.Names()))
}

// newClientGuard builds the guard of the public API: the client keys and the per-key limits.
func newClientGuard(o options, reg prometheus.Registerer) (*clientauth.Guard, error) {
	keys, err := loadClientKeys(o)
	if err != nil {
		return nil, err
	}
	g, err := clientauth.New(clientauth.Config{Keys: keys, RateLimit: o.RateLimit, RateBurst: o.RateBurst, MaxConcurrentPerKey: o.MaxConcurrentPerKey,
		OpenPaths: router.OpenPaths, Registerer: reg, WriteError: router.WriteClientError})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return g, nil
}

// loadClientKeys builds the client key set from --api-key (unnamed ones are flag-N, the Nth
// flag) and --api-key-file (file-LINE). nil when there are none.
func loadClientKeys(o options) (*clientauth.KeySet, error) {
	keys, err := clientauth.ParseKeys([]byte(strings.Join(o.APIKeys, "\n")), "flag")
	if err != nil {
		return nil, fmt.Errorf("gateway: --api-key (line N is the Nth --api-key): %w", err)
	}
	if o.APIKeyFile != "" {
		b, err := os.ReadFile(o.APIKeyFile)
		if err != nil {
			return nil, fmt.Errorf("gateway: --api-key-file: %w", err)
		}
		fk, err := clientauth.ParseKeys(b, "file")
		if err != nil {
			return nil, fmt.Errorf("gateway: --api-key-file %s: %w", o.APIKeyFile, err)
		}
		if len(fk) == 0 {
			return nil, fmt.Errorf("gateway: --api-key-file %s holds no key", o.APIKeyFile)
		}
		keys = append(keys, fk...)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	ks, err := clientauth.NewKeySet(keys)
	if err != nil {
		return nil, fmt.Errorf("gateway: client keys: %w", err)
	}
	return ks, nil
}

// drain shuts the API server down within timeout; streams still running then get an OpenAI
// error event (gateway_shutting_down) rather than a bare disconnect, with a short grace for the
// handlers to write it before the connections go.
func drain(timeout time.Duration, api *http.Server, rt *router.Router, log *zap.Logger) {
	dctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := api.Shutdown(dctx); err != nil {
		log.Warn("drain deadline passed; ending in-flight requests with an error", zap.Error(err))
		rt.AbortInFlight()
		gctx, gcancel := context.WithTimeout(context.Background(), abortGrace)
		defer gcancel()
		if err := api.Shutdown(gctx); err != nil {
			_ = api.Close()
		}
	}
}

// buildRouterConfig turns options into the router's configuration: every model (the flags'
// default model first, then the config file's, built by one function), the fleet's and the
// router's own settings.
func buildRouterConfig(o options, log *zap.Logger, reg prometheus.Registerer) (router.Config, error) {
	cfg := router.Config{
		Fleet: fleet.Config{KVIndex: o.KVIndex, HealthInterval: o.HealthInterval, HealthTimeout: o.HealthTimeout,
			EngineMetricsInterval: o.EngineMetricsInterval, DrainTimeout: o.DrainTimeout, KVListen: o.KVListen},
		ForwardTokenIDs:      o.ForwardTokenIDs,
		ForwardPriority:      o.ForwardPriority,
		AdminToken:           o.AdminToken,
		Profiling:            o.Pprof,
		MaxPrompts:           o.MaxPrompts,
		MaxPromptTokens:      o.MaxPromptTokens,
		MaxBodyBytes:         o.MaxBodyBytes,
		MaxN:                 o.MaxN,
		MaxInFlightPerWorker: o.MaxInFlightPerWorker,
		Queue:                pipeline.QueueConfig{Max: o.QueueMax, Timeout: o.QueueTimeout, MaxWait: o.QueueMaxWait, LookAhead: o.QueueLookAhead, MaxWaitingPerWorker: o.MaxWaitingPerWorker, Reserve: o.QueueReserve},
		UpstreamTimeout:      o.UpstreamTimeout,
		Logger:               log,
		Registerer:           reg,
	}
	def := o.defaultModel()
	if def.ModelPath == "" && def.Tokenizer == "" && len(o.Models) == 0 {
		log.Warn("no tokenizer (--model-path/--tokenizer): text prompts and chat requests are routed without prefix information")
	}
	for _, m := range append([]modelOptions{def}, o.Models...) {
		rm, err := buildModel(&o, m, log)
		if err != nil {
			return cfg, err
		}
		cfg.Models = append(cfg.Models, rm)
	}
	km, err := kvbridge.NewMetrics(reg)
	if err != nil {
		return cfg, err
	}
	cfg.Fleet.KVMetrics = km
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
