package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
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
	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/sim"
	"github.com/kvgate/kvgate/pkg/tokenizer"
	"github.com/kvgate/kvgate/pkg/worker"
)

type options struct {
	host, model, tokenizerPath string
	runtime                    worker.Runtime
	port, grpcPort, dpSize     int
	core                       sim.Config
	timeScale                  float64
	noGRPCKV                   bool
	streamInterval             int

	kvEvents, kvReplay, kvTopic, kvFormat, kvHash string
	kvConnect, kvReplayTopic                      bool
	kvHistory                                     int
	kvSeqStart                                    uint64

	faultDropEvery, faultRestartAfter int
	faultEventDelay, faultStallFor    time.Duration
	faultStallAfter, faultExitAfter   int64
	replyFile                         string

	chatTemplate, reasoningParser, toolCallParser string
	parsers                                       *parse.Parsers // of the two parser flags; nil for none

	apiKey, tlsCert, tlsKey, tlsClientCA string

	logLevel string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	d := sim.DefaultConfig()
	fs := flag.NewFlagSet("simworker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `simworker: simulated LLM engine for kvgate tests, demos and benchmarks.

It models one vLLM-like engine per DP rank: a paged KV cache with prefix caching
(sha256-chained block hashes), a continuous-batching scheduler with chunked prefill, and
a step-time model (overhead + prefill tokens x cost + sequences x cost). TTFT emerges from
queueing and cache hits. Wall time = simulated time x --time-scale; latency metrics are in
simulated seconds.

Surfaces: HTTP /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics
(vLLM names), /debug/cache, POST /reset_prefix_cache; gRPC engine service (--grpc-port);
ZMQ KV events (--kv-events).

Chat: with --tokenizer DIR (a model directory: tokenizer.json, tokenizer_config.json and/or
chat_template.jinja) chat requests are rendered with the model's template, as vLLM renders
them, and the rendered ids run through the simulated engine like a completion's. With a
tokenizer.json FILE, chat needs --chat-template. Without a template chat answers vLLM's 400.
--reasoning-parser and --tool-call-parser (vLLM's names) split chat output into reasoning,
content and tool_calls, e.g. of a --reply-file script; without --tool-call-parser, requests
whose tool_choice is not "none" get vLLM's 400 (as without --enable-auto-tool-choice).

Fault switches (for reliability tests):
  --fault-drop-every N      do not send every Nth event batch on the PUB (replay still has it)
  --fault-restart-after N   after N event batches, restart the publisher's sequence counter
                            and empty its replay history (the cache is kept)
  --fault-event-delay D     send each event batch D after its engine step
  --fault-stall-after N     after N finished requests the engine freezes (no tokens, no
                            events) for --fault-stall-for (0 = until shutdown)
  --fault-exit-after N      exit(3) abruptly after N completed requests, HTTP or gRPC (a crash)

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.host, "host", "", "listen address for HTTP and gRPC (empty = all interfaces)")
	fs.IntVar(&o.port, "port", 8000, "HTTP port")
	fs.IntVar(&o.grpcPort, "grpc-port", 0, "gRPC port (0 = no gRPC server)")
	o.runtime = worker.RuntimeVLLM
	fs.Var(&o.runtime, "runtime", "gRPC engine service: vllm|sglang|tokenspeed")
	fs.StringVar(&o.tokenizerPath, "tokenizer", "", "tokenizer.json, or a model directory holding it (a directory also gives chat its template), for text prompts and chat; without it only token-id prompts are accepted")
	fs.StringVar(&o.chatTemplate, "chat-template", "", "chat template FILE (or the template text, as vLLM's --chat-template) instead of the model directory's; needs --tokenizer")
	fs.StringVar(&o.reasoningParser, "reasoning-parser", "", "split reasoning out of chat output as vLLM's --reasoning-parser NAME (qwen3, deepseek_r1, openai_gptoss)")
	fs.StringVar(&o.toolCallParser, "tool-call-parser", "", "parse tool calls out of chat output as vLLM's --enable-auto-tool-choice --tool-call-parser NAME (hermes, llama3_json, deepseek_v3, mistral, openai)")
	fs.StringVar(&o.model, "model", "sim-model", "served model name")
	fs.StringVar(&o.kvEvents, "kv-events", "", "ZMQ PUB endpoint for KV events, e.g. tcp://127.0.0.1:5557 (rank r uses port+r); empty = no ZMQ events")
	fs.BoolVar(&o.kvConnect, "kv-connect", false, "connect the PUB to --kv-events (a collector's SUB) instead of binding it")
	fs.StringVar(&o.kvReplay, "kv-replay", "", "ZMQ ROUTER replay endpoint, e.g. tcp://*:5567 (rank r uses port+r); empty = no replay")
	fs.BoolVar(&o.kvReplayTopic, "kv-replay-topic-frame", false, "replay replies carry the topic frame (vLLM with PR #45177) instead of [\"\", seq, payload]")
	fs.StringVar(&o.kvTopic, "kv-topic", "", "topic (frame 0) of every KV-event message")
	fs.StringVar(&o.kvFormat, "kv-event-format", "array", "KV event encoding: array (vLLM <= 0.23) | map (vLLM >= 0.26)")
	fs.StringVar(&o.kvHash, "kv-hash", "int", "block hash encoding: int (64-bit fold) | bytes (32-byte sha256 digest)")
	fs.IntVar(&o.kvHistory, "kv-history", kvbridge.DefaultPublisherHistory, "batches kept for ZMQ replay and gRPC SubscribeKvEvents")
	fs.Uint64Var(&o.kvSeqStart, "kv-seq-start", 0, "first ZMQ sequence number (vLLM: 0)")
	fs.BoolVar(&o.noGRPCKV, "no-grpc-kv-events", false, "answer gRPC SubscribeKvEvents with UNIMPLEMENTED")
	fs.IntVar(&o.dpSize, "dp-size", 1, "data-parallel ranks: independent engines, each with its own cache and event stream")
	fs.IntVar(&o.core.NumBlocks, "num-blocks", d.NumBlocks, "KV cache blocks per rank")
	fs.IntVar(&o.core.BlockSize, "block-size", d.BlockSize, "tokens per KV block")
	fs.IntVar(&o.core.MaxRunning, "max-running", d.MaxRunning, "max sequences in the running batch (vLLM max_num_seqs)")
	fs.IntVar(&o.core.MaxBatchedTokens, "max-batched-tokens", d.MaxBatchedTokens, "token budget per step (vLLM max_num_batched_tokens; chunked prefill)")
	fs.DurationVar(&o.core.StepOverhead, "step-overhead", d.StepOverhead, "fixed cost of every engine step (simulated)")
	fs.DurationVar(&o.core.PrefillPerToken, "prefill-per-token", d.PrefillPerToken, "cost per prefilled (uncached) prompt token (simulated)")
	fs.DurationVar(&o.core.DecodePerSeq, "decode-per-seq", d.DecodePerSeq, "cost per sequence in a step (simulated)")
	fs.IntVar(&o.core.MaxModelLen, "max-model-len", d.MaxModelLen, "context length (prompt + output)")
	fs.IntVar(&o.core.VocabSize, "vocab-size", d.VocabSize, "vocabulary size when no --tokenizer is given")
	fs.StringVar(&o.core.HashSeed, "hash-seed", "", "seed of the block hash chain (like PYTHONHASHSEED)")
	fs.IntVar(&o.streamInterval, "stream-interval", 1, "signal streaming clients every N tokens (first token and end always at once), like SGLang's --stream-interval")
	fs.Float64Var(&o.timeScale, "time-scale", 1, "wall time = simulated time x this (0.02 runs 50x faster than the modelled GPU)")
	fs.IntVar(&o.faultDropEvery, "fault-drop-every", 0, "drop every Nth KV event batch on the PUB (0 = off)")
	fs.IntVar(&o.faultRestartAfter, "fault-restart-after", 0, "restart the KV publisher's sequence after N batches (0 = off)")
	fs.DurationVar(&o.faultEventDelay, "fault-event-delay", 0, "delay every KV event batch by this much")
	fs.Int64Var(&o.faultStallAfter, "fault-stall-after", 0, "freeze the engine after N finished requests (0 = off)")
	fs.DurationVar(&o.faultStallFor, "fault-stall-for", 0, "how long --fault-stall-after freezes the engine (0 = until shutdown)")
	fs.Int64Var(&o.faultExitAfter, "fault-exit-after", 0, "exit abruptly (status 3) after N completed requests (0 = off)")
	fs.StringVar(&o.replyFile, "reply-file", "", "FILE of JSON strings, one per line: generation n emits exactly the tokens of line n mod N and stops (needs --tokenizer)")
	fs.StringVar(&o.apiKey, "api-key", "", "require Authorization: Bearer KEY on /v1/* (401 {\"error\":\"Unauthorized\"} otherwise, as vLLM's --api-key) and as gRPC authorization metadata")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate: serve HTTP (https://) and gRPC over TLS (with --tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&o.tlsClientCA, "tls-client-ca", "", "PEM CAs: require client certificates signed by them on HTTP and gRPC (mTLS; needs --tls-cert)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug|info|warn|error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("simworker: unexpected arguments %q", fs.Args())
	}
	if o.kvFormat != "array" && o.kvFormat != "map" {
		return nil, fmt.Errorf("simworker: --kv-event-format %q: want array or map", o.kvFormat)
	}
	if o.kvHash != "int" && o.kvHash != "bytes" {
		return nil, fmt.Errorf("simworker: --kv-hash %q: want int or bytes", o.kvHash)
	}
	if o.dpSize < 1 || o.dpSize > 64 {
		return nil, fmt.Errorf("simworker: --dp-size %d: want 1..64", o.dpSize)
	}
	if o.timeScale <= 0 {
		return nil, fmt.Errorf("simworker: --time-scale %v: must be positive", o.timeScale)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") || (o.tlsClientCA != "" && o.tlsCert == "") {
		return nil, errors.New("simworker: --tls-cert and --tls-key go together, and --tls-client-ca needs them")
	}
	if o.tokenizerPath == "" && (o.chatTemplate != "" || o.reasoningParser != "" || o.toolCallParser != "") {
		return nil, errors.New("simworker: --chat-template, --reasoning-parser and --tool-call-parser need --tokenizer (chat is rendered and decoded with the model's tokenizer)")
	}
	if o.reasoningParser != "" || o.toolCallParser != "" {
		var err error
		if o.parsers, err = parse.NewParsers(o.reasoningParser, o.toolCallParser); err != nil {
			return nil, fmt.Errorf("simworker: %w", err)
		}
	}
	return o, nil
}

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

func run(ctx context.Context, o *options) error {
	log, err := newLogger(o.logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	var codec sim.TextCodec
	var bos int32
	var replies *sim.Replies
	var renderer *chat.Renderer
	if o.replyFile != "" && o.tokenizerPath == "" {
		return errors.New("simworker: --reply-file needs --tokenizer (the replies are tokenized as the model would emit them)")
	}
	if o.tokenizerPath != "" {
		var tok *tokenizer.Tokenizer
		isDir := false
		if st, statErr := os.Stat(o.tokenizerPath); statErr == nil && st.IsDir() {
			isDir = true
			tok, err = tokenizer.LoadDir(o.tokenizerPath)
		} else {
			tok, err = tokenizer.LoadFile(o.tokenizerPath)
		}
		if err != nil {
			return fmt.Errorf("simworker: load tokenizer: %w", err)
		}
		if renderer, err = chatRenderer(o, tok, isDir); err != nil {
			return err
		}
		codec = sim.NewTokenizerCodec(tok)
		o.core.VocabSize = tok.VocabSize()
		if eos, ok := tok.EOS(); ok {
			o.core.EOSTokenIDs = []uint32{eos}
		}
		if b, ok := tok.BOS(); ok {
			bos = int32(b)
		}
		if o.replyFile != "" {
			// Output text as the model emits it: special-token text is the special token, no BOS.
			if replies, err = sim.LoadReplies(o.replyFile, func(s string) ([]uint32, error) { return tok.Encode(nil, s, false) }); err != nil {
				return err
			}
		}
	}

	// Event sinks: ZMQ publishers and/or the gRPC SubscribeKvEvents history.
	var sinks sim.MultiSink
	var zmqSink *sim.ZMQSink
	if o.kvEvents != "" {
		mode := kvbridge.PubBind
		if o.kvConnect {
			mode = kvbridge.PubConnect
		}
		zmqSink, err = sim.NewZMQSink(sim.ZMQSinkConfig{
			Publisher: kvbridge.PublisherConfig{
				Endpoint: o.kvEvents, Mode: mode, Replay: o.kvReplay, Topic: o.kvTopic, History: o.kvHistory,
				StartSeq: o.kvSeqStart, ReplayTopicFrame: o.kvReplayTopic, Logger: log,
				Encode: kvbridge.EncodeOptions{MapEvents: o.kvFormat == "map", BytesHashes: o.kvHash == "bytes"},
			},
			Ranks: o.dpSize, Delay: o.faultEventDelay, DropEvery: o.faultDropEvery, RestartAfter: o.faultRestartAfter,
		})
		if err != nil {
			return err
		}
		defer zmqSink.Close()
		sinks = append(sinks, zmqSink)
		pubs, replays := zmqSink.Endpoints()
		log.Info("kv events", zap.Strings("pub", pubs), zap.Strings("replay", replays), zap.String("format", o.kvFormat), zap.String("hash", o.kvHash))
	}
	var bridge *kvbridge.BridgeServer
	if o.grpcPort != 0 && !o.noGRPCKV {
		bridge, err = kvbridge.NewBridgeServer(kvbridge.BridgeConfig{Runtime: o.runtime, History: o.kvHistory}, log)
		if err != nil {
			return err
		}
		sinks = append(sinks, sim.ConsumerSink{C: bridge})
	}
	var sink sim.EventSink
	if len(sinks) > 0 {
		sink = sinks
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ranks := make(sim.Ranks, 0, o.dpSize)
	for r := range o.dpSize {
		e, err := sim.NewEngine(sim.EngineConfig{Core: o.core, Rank: r, TimeScale: o.timeScale,
			StallAfter: o.faultStallAfter, StallFor: o.faultStallFor, StreamInterval: o.streamInterval}, sim.SystemClock{}, sink, nil)
		if err != nil {
			return err
		}
		ranks = append(ranks, e)
	}
	metrics, err := sim.NewMetrics(reg, o.model, o.core, ranks)
	if err != nil {
		return err
	}
	for _, e := range ranks {
		e.SetObserver(metrics)
	}

	var completed atomic.Int64
	var onCompleted func()
	if o.faultExitAfter > 0 {
		onCompleted = func() {
			if completed.Add(1) >= o.faultExitAfter {
				log.Warn("fault: exiting", zap.Int64("after_requests", o.faultExitAfter))
				_ = log.Sync()
				os.Exit(3)
			}
		}
	}
	scfg := sim.ServerConfig{Model: o.model, Codec: codec, Logger: log, OnCompleted: onCompleted, Replies: replies, ChatParsers: o.parsers}
	if renderer != nil {
		scfg.Chat = renderer
	}
	hs, err := sim.NewServer(scfg, ranks, reg)
	if err != nil {
		return err
	}
	hl, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return fmt.Errorf("simworker: http listen: %w", err)
	}
	tlsCfg, err := serverTLS(o)
	if err != nil {
		hl.Close()
		return err
	}
	if tlsCfg != nil {
		hl = tls.NewListener(hl, tlsCfg)
	}
	httpSrv := &http.Server{Handler: sim.RequireAPIKey(hs.Handler(), o.apiKey), ReadHeaderTimeout: 10 * time.Second}

	var grpcSrv *grpc.Server
	var gl net.Listener
	if o.grpcPort != 0 {
		gs, err := sim.NewGRPCServer(sim.GRPCConfig{Runtime: o.runtime, Model: o.model, TokenizerPath: o.tokenizerPath,
			Codec: codec, BOSTokenID: bos, Logger: log, OnCompleted: onCompleted, Replies: replies}, ranks, bridge)
		if err != nil {
			hl.Close()
			return err
		}
		if gl, err = net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.grpcPort))); err != nil {
			hl.Close()
			return fmt.Errorf("simworker: grpc listen: %w", err)
		}
		gopts := append(kvbridge.BridgeServerOptions(), sim.APIKeyServerOptions(o.apiKey)...)
		if tlsCfg != nil {
			gopts = append(gopts, grpc.Creds(credentials.NewTLS(tlsCfg)))
		}
		grpcSrv = grpc.NewServer(gopts...)
		gs.Register(grpcSrv)
	}
	cfg := ranks[0].Config()
	log.Info("simworker up", zap.String("http", hl.Addr().String()), zap.Bool("tls", tlsCfg != nil), zap.Bool("mtls", o.tlsClientCA != ""), zap.Bool("api_key", o.apiKey != ""), zap.Bool("chat", renderer != nil), zap.Int("grpc_port", o.grpcPort), zap.Stringer("runtime", o.runtime),
		zap.String("model", o.model), zap.Int("dp_size", o.dpSize), zap.Int("num_blocks", cfg.NumBlocks), zap.Int("block_size", cfg.BlockSize),
		zap.Float64("time_scale", o.timeScale))

	// Engines and publishers stop last, after the servers drained.
	engCtx, engCancel := context.WithCancel(context.Background())
	defer engCancel()
	var wg sync.WaitGroup
	for _, e := range ranks {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(engCtx) }()
	}
	if zmqSink != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := zmqSink.Run(engCtx); err != nil {
				log.Error("kv events", zap.Error(err))
			}
		}()
	}
	errc := make(chan error, 2)
	go func() {
		if err := httpSrv.Serve(hl); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("simworker: http: %w", err)
		}
	}()
	if grpcSrv != nil {
		go func() {
			if err := grpcSrv.Serve(gl); err != nil {
				errc <- fmt.Errorf("simworker: grpc: %w", err)
			}
		}()
	}
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case runErr = <-errc:
	}
	// Graceful: stop accepting, let in-flight requests finish (bounded), then stop engines.
	shCtx, shCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer shCancel()
	if bridge != nil {
		bridge.Close()
	}
	if grpcSrv != nil {
		done := make(chan struct{})
		go func() { grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-shCtx.Done():
			grpcSrv.Stop()
		}
	}
	if err := httpSrv.Shutdown(shCtx); err != nil {
		_ = httpSrv.Close()
	}
	engCancel()
	wg.Wait()
	return runErr
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
