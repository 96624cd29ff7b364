package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/sim"
	"github.com/kvgate/kvgate/pkg/tokenizer"
	"github.com/kvgate/kvgate/pkg/worker"
)

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func newLogger(level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("simworker: --log-level: %w", err)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	return cfg.Build()
}

// serverTLS returns the TLS configuration of --tls-cert/--tls-key (nil without them), requiring
// client certificates signed by --tls-client-ca when given.
func serverTLS(o *options) (*tls.Config, error) {
	if o.tlsCert == "" {
		return nil, nil
	}
	cfg, err := worker.LoadServerTLS(o.tlsCert, o.tlsKey, o.tlsClientCA)
	if err != nil {
		return nil, fmt.Errorf("simworker: %w", err)
	}
	return cfg, nil
}

// run builds the simulator of o and serves until ctx is done or a server fails, then shuts
// down gracefully: servers first (in-flight requests finish, bounded), engines and event
// publishers last.
func run(ctx context.Context, o *options) error {
	log, err := newLogger(o.logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	m, err := loadTextModel(o)
	if err != nil {
		return err
	}
	ev, err := newEventSinks(o, log)
	if err != nil {
		return err
	}
	defer ev.close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ranks, err := newRanks(o, m.core, ev.sink(), reg)
	if err != nil {
		return err
	}
	srv, err := newServers(o, log, m, ranks, ev.bridge, reg)
	if err != nil {
		return err
	}
	cfg := ranks[0].Config()
	log.Info("simworker up", zap.String("http", srv.hl.Addr().String()), zap.Bool("tls", srv.tls), zap.Bool("mtls", o.tlsClientCA != ""), zap.Bool("api_key", o.apiKey != ""), zap.Bool("chat", m.renderer != nil), zap.Int("grpc_port", o.grpcPort), zap.Stringer("runtime", o.runtime),
		zap.String("model", o.model), zap.Int("dp_size", o.dpSize), zap.Int("num_blocks", cfg.NumBlocks), zap.Int("block_size", cfg.BlockSize),
		zap.Float64("time_scale", o.timeScale))
	return serve(ctx, log, ranks, ev, srv)
}

// textModel is what --tokenizer gives the simulator: the engine config with the tokenizer's
// vocabulary size and EOS id, the text codec, the BOS id the gRPC service reports, the
// --reply-file script and chat's renderer. Without --tokenizer all but core are zero.
type textModel struct {
	core     sim.Config
	codec    sim.TextCodec
	bos      int32
	replies  *sim.Replies
	renderer *chat.Renderer
}

// loadTextModel loads --tokenizer, the chat template and --reply-file.
func loadTextModel(o *options) (*textModel, error) {
	m := &textModel{core: o.core}
	if o.replyFile != "" && o.tokenizerPath == "" {
		return nil, errors.New("simworker: --reply-file needs --tokenizer (the replies are tokenized as the model would emit them)")
	}
	if o.tokenizerPath == "" {
		return m, nil
	}
	modelDir := isDir(o.tokenizerPath)
	tok, err := tokenizer.LoadPath(o.tokenizerPath)
	if err != nil {
		return nil, fmt.Errorf("simworker: load tokenizer: %w", err)
	}
	if m.renderer, err = chatRenderer(o, tok, modelDir); err != nil {
		return nil, err
	}
	m.codec = sim.NewTokenizerCodec(tok)
	m.core.VocabSize = tok.VocabSize()
	if eos, ok := tok.EOS(); ok {
		m.core.EOSTokenIDs = []uint32{eos}
	}
	if b, ok := tok.BOS(); ok {
		m.bos = int32(b)
	}
	if o.replyFile != "" {
		// Output text as the model emits it: special-token text is the special token, no BOS.
		if m.replies, err = sim.LoadReplies(o.replyFile, func(s string) ([]uint32, error) { return tok.Encode(nil, s, false) }); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// eventSinks are where the engines' KV events go: the ZMQ publishers of --kv-events and the
// gRPC SubscribeKvEvents history (with --grpc-port, unless --no-grpc-kv-events). Either may be
// nil.
type eventSinks struct {
	zmq    *sim.ZMQSink
	bridge *kvbridge.BridgeServer
}

// newEventSinks builds the sinks of o; the ZMQ publishers bind or connect in their Run.
func newEventSinks(o *options, log *zap.Logger) (*eventSinks, error) {
	ev := &eventSinks{}
	if o.kvEvents != "" {
		mode := kvbridge.PubBind
		if o.kvConnect {
			mode = kvbridge.PubConnect
		}
		z, err := sim.NewZMQSink(sim.ZMQSinkConfig{
			Publisher: kvbridge.PublisherConfig{
				Endpoint: o.kvEvents, Mode: mode, Replay: o.kvReplay, Topic: o.kvTopic, History: o.kvHistory,
				StartSeq: o.kvSeqStart, ReplayTopicFrame: o.kvReplayTopic, Logger: log,
				Encode: kvbridge.EncodeOptions{MapEvents: o.kvFormat == "map", BytesHashes: o.kvHash == "bytes", ExtraKeyPairs: o.kvExtraKeys == "pairs"},
			},
			Ranks: o.dpSize, Delay: o.faultEventDelay, DropEvery: o.faultDropEvery, RestartAfter: o.faultRestartAfter,
		})
		if err != nil {
			return nil, err
		}
		ev.zmq = z
		pubs, replays := z.Endpoints()
		log.Info("kv events", zap.Strings("pub", pubs), zap.Strings("replay", replays), zap.String("format", o.kvFormat), zap.String("hash", o.kvHash))
	}
	if o.grpcPort != 0 && !o.noGRPCKV {
		b, err := kvbridge.NewBridgeServer(kvbridge.BridgeConfig{Runtime: o.runtime, History: o.kvHistory}, log)
		if err != nil {
			ev.close()
			return nil, err
		}
		ev.bridge = b
	}
	return ev, nil
}

// sink returns the engines' EventSink: every sink there is, or nil for none.
func (ev *eventSinks) sink() sim.EventSink {
	var sinks sim.MultiSink
	if ev.zmq != nil {
		sinks = append(sinks, ev.zmq)
	}
	if ev.bridge != nil {
		sinks = append(sinks, sim.ConsumerSink{C: ev.bridge})
	}
	if len(sinks) == 0 {
		return nil
	}
	return sinks
}

// close releases the ZMQ publishers, after their Run returned.
func (ev *eventSinks) close() {
	if ev.zmq != nil {
		ev.zmq.Close()
	}
}

// newRanks builds the --dp-size engines of core, publishing into sink, and their vllm:
// metrics on reg.
func newRanks(o *options, core sim.Config, sink sim.EventSink, reg *prometheus.Registry) (sim.Ranks, error) {
	ranks := make(sim.Ranks, 0, o.dpSize)
	for r := range o.dpSize {
		e, err := sim.NewEngine(sim.EngineConfig{Core: core, Rank: r, TimeScale: o.timeScale,
			StallAfter: o.faultStallAfter, StallFor: o.faultStallFor, StreamInterval: o.streamInterval}, sim.SystemClock{}, sink, nil)
		if err != nil {
			return nil, err
		}
		ranks = append(ranks, e)
	}
	metrics, err := sim.NewMetrics(reg, o.model, core, ranks)
	if err != nil {
		return nil, err
	}
	for _, e := range ranks {
		e.SetObserver(metrics)
	}
	return ranks, nil
}

// exitAfter returns the completion hook of --fault-exit-after: exit(3) abruptly once that many
// requests completed, HTTP and gRPC together. Nil when the switch is off.
func exitAfter(o *options, log *zap.Logger) func() {
	if o.faultExitAfter <= 0 {
		return nil
	}
	var completed atomic.Int64
	return func() {
		if completed.Add(1) >= o.faultExitAfter {
			log.Warn("fault: exiting", zap.Int64("after_requests", o.faultExitAfter))
			_ = log.Sync()
			os.Exit(3)
		}
	}
}

// servers are the HTTP server and, with --grpc-port, the gRPC one, each with its listener
// (already listening).
type servers struct {
	http *http.Server
	hl   net.Listener
	grpc *grpc.Server // nil without --grpc-port
	gl   net.Listener
	// boot is an sglang prefill engine's bootstrap server (nil otherwise), on bl.
	boot *http.Server
	bl   net.Listener
	tls  bool // both serve TLS
}

// newServers builds the HTTP and gRPC surfaces over ranks and opens their listeners; on error
// nothing stays open.
func newServers(o *options, log *zap.Logger, m *textModel, ranks sim.Ranks, bridge *kvbridge.BridgeServer, reg *prometheus.Registry) (*servers, error) {
	onCompleted := exitAfter(o, log)
	scfg := sim.ServerConfig{Model: o.model, Codec: m.codec, Logger: log, OnCompleted: onCompleted, Replies: m.replies, ChatParsers: o.parsers,
		HealthFlap: o.faultHealthFlap}
	if m.renderer != nil {
		scfg.Chat = m.renderer
	}
	hl, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return nil, fmt.Errorf("simworker: http listen: %w", err)
	}
	scfg.PD = pdConfig(o, hl)
	hs, err := sim.NewServer(scfg, ranks, reg)
	if err != nil {
		hl.Close()
		return nil, err
	}
	tlsCfg, err := serverTLS(o)
	if err != nil {
		hl.Close()
		return nil, err
	}
	if tlsCfg != nil {
		hl = tls.NewListener(hl, tlsCfg)
	}
	s := &servers{http: &http.Server{Handler: sim.RequireAPIKey(hs.Handler(), o.apiKey), ReadHeaderTimeout: 10 * time.Second},
		hl: hl, tls: tlsCfg != nil}
	if h := hs.BootstrapHandler(); h != nil {
		if s.bl, err = net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.pdBootstrapPort))); err != nil {
			hl.Close()
			return nil, fmt.Errorf("simworker: bootstrap listen: %w", err)
		}
		s.boot = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	}
	if o.grpcPort == 0 {
		return s, nil
	}
	gs, err := sim.NewGRPCServer(sim.GRPCConfig{Runtime: o.runtime, Model: o.model, TokenizerPath: o.tokenizerPath,
		Codec: m.codec, BOSTokenID: m.bos, Logger: log, OnCompleted: onCompleted, Replies: m.replies, Pairs: hs}, ranks, bridge)
	if err != nil {
		hl.Close()
		return nil, err
	}
	if s.gl, err = net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.grpcPort))); err != nil {
		hl.Close()
		return nil, fmt.Errorf("simworker: grpc listen: %w", err)
	}
	gopts := append(kvbridge.BridgeServerOptions(), sim.APIKeyServerOptions(o.apiKey)...)
	if tlsCfg != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	s.grpc = grpc.NewServer(gopts...)
	gs.Register(s.grpc)
	return s, nil
}

// pdConfig returns the server's pair role, its side channel the HTTP listener hl (at --host,
// or loopback when that is empty), or nil without --pd-role.
func pdConfig(o *options, hl net.Listener) *sim.PDConfig {
	if o.pd == nil {
		return nil
	}
	pd := *o.pd
	host := o.host
	if host == "" {
		host = "127.0.0.1"
	}
	pd.SideChannel = net.JoinHostPort(host, strconv.Itoa(hl.Addr().(*net.TCPAddr).Port))
	return &pd
}

// serve runs the engines, the ZMQ publishers and the servers until ctx is done or a server
// fails, then stops accepting, lets in-flight requests finish (bounded) and stops the engines
// and publishers last. It returns the server's error, or nil after ctx.
func serve(ctx context.Context, log *zap.Logger, ranks sim.Ranks, ev *eventSinks, srv *servers) error {
	engCtx, engCancel := context.WithCancel(context.Background())
	defer engCancel()
	var wg sync.WaitGroup
	for _, e := range ranks {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(engCtx) }()
	}
	if ev.zmq != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ev.zmq.Run(engCtx); err != nil {
				log.Error("kv events", zap.Error(err))
			}
		}()
	}
	errc := make(chan error, 3)
	go func() {
		if err := srv.http.Serve(srv.hl); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("simworker: http: %w", err)
		}
	}()
	if srv.grpc != nil {
		go func() {
			if err := srv.grpc.Serve(srv.gl); err != nil {
				errc <- fmt.Errorf("simworker: grpc: %w", err)
			}
		}()
	}
	if srv.boot != nil {
		go func() {
			if err := srv.boot.Serve(srv.bl); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("simworker: bootstrap: %w", err)
			}
		}()
		defer srv.boot.Close() // its requests end with the prefills they wait for
	}
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case runErr = <-errc:
	}
	shCtx, shCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer shCancel()
	if ev.bridge != nil {
		ev.bridge.Close()
	}
	if srv.grpc != nil {
		done := make(chan struct{})
		go func() { srv.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-shCtx.Done():
			srv.grpc.Stop()
		}
	}
	if err := srv.http.Shutdown(shCtx); err != nil {
		_ = srv.http.Close()
	}
	engCancel()
	wg.Wait()
	return runErr
}

// isDir reports whether path is a directory: --tokenizer names a model directory or a
// tokenizer.json file.
func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// chatRenderer builds the chat renderer of the model directory (or of --chat-template, with
// the special tokens of the tokenizer file's directory). A tokenizer file without
// --chat-template gives none: chat then answers 400.
func chatRenderer(o *options, tok *tokenizer.Tokenizer, isDir bool) (*chat.Renderer, error) {
	dir := o.tokenizerPath
	if !isDir {
		if o.chatTemplate == "" {
			return nil, nil
		}
		dir = filepath.Dir(o.tokenizerPath)
	}
	// As `vllm serve`: without a tool-call parser, tool_choice other than "none" is refused.
	r, err := chat.New(dir, chat.Options{Tokenizer: tok, ChatTemplate: o.chatTemplate, NoToolParser: o.toolCallParser == ""})
	if err != nil {
		return nil, fmt.Errorf("simworker: chat template: %w", err)
	}
	return r, nil
}
