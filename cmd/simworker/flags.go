package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/sim"
	"github.com/kvgate/kvgate/pkg/worker"
)

// options is the parsed command line.
type options struct {
	host, model, tokenizerPath string
	runtime                    worker.Runtime
	port, grpcPort, dpSize     int
	core                       sim.Config
	timeScale                  float64
	noGRPCKV                   bool
	streamInterval             int

	kvEvents, kvReplay, kvTopic, kvFormat, kvHash string
	kvExtraKeys                                   string
	kvConnect, kvReplayTopic                      bool
	kvHistory                                     int
	kvSeqStart                                    uint64

	faultDropEvery, faultRestartAfter int
	faultEventDelay, faultStallFor    time.Duration
	faultHealthFlap                   time.Duration
	faultStallAfter, faultExitAfter   int64
	replyFile                         string

	chatTemplate, reasoningParser, toolCallParser string
	parsers                                       *parse.Parsers // of the two parser flags; nil for none

	apiKey, tlsCert, tlsKey, tlsClientCA string

	// Prefill/decode role (--pd-*): pd is nil for an aggregated engine.
	pdRole, pdTransfer string
	pdBootstrapPort    int
	pdBandwidth        float64
	pdKVBytesPerToken  int
	pdLease, pdWait    time.Duration
	pd                 *sim.PDConfig

	logLevel string
}

// usage heads --help, above the flag list.
const usage = `simworker: simulated LLM engine for kvgate tests, demos and benchmarks.

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
For a multimodal model directory (docs/multimodal.md) image placeholders are expanded by the
gateway's family rules (Qwen2/2.5/3-VL on a data: URL's image size), each item is keyed by its
uuid (else a SHA-256 of its bytes or URL) in its blocks' hashes, and BlockStored events carry
the keys as extra_keys (--kv-extra-keys pairs|ids).

Prefill/decode disaggregation (wire/pd.md): --pd-role prefill|decode --pd-transfer nixl|mooncake|sglang
makes the engine one side of a pair. A nixl prefill engine answers requests tagged
do_remote_decode with kv_transfer_params naming its held blocks and its side channel (this
HTTP listener); a nixl decode engine reads them there. An sglang prefill engine serves a
bootstrap server on --pd-bootstrap-port, waits for its decode engine and hands the prompt
over; an sglang decode engine fetches it from bootstrap_host:bootstrap_port. A mooncake prefill
engine holds a request's blocks under its kv_transfer_params transfer_id and serves GET /query
(its engine id) and the KV on --pd-bootstrap-port; a mooncake decode engine needs transfer_id,
remote_engine_id and remote_bootstrap_addr (400 otherwise) and fetches the KV there. The decode
engine waits the transfer time (KV bytes / --pd-bandwidth) and caches the received blocks,
publishing them as BlockStored events, then decodes without recomputing them. With
--grpc-port the gRPC service plays the same role: --runtime vllm takes kv_transfer_params_json
(GenerateRequest field 8, NIXL's or Mooncake's) and answers a NIXL prefill leg with the
hand-off in GenerateComplete field 12; sglang takes disaggregated_params and tokenspeed
kv_bootstrap_info rooms.

Fault switches (for reliability tests):
  --fault-drop-every N      do not send every Nth event batch on the PUB (replay still has it)
  --fault-restart-after N   after N event batches, restart the publisher's sequence counter
                            and empty its replay history (the cache is kept)
  --fault-event-delay D     send each event batch D after its engine step
  --fault-stall-after N     after N finished requests the engine freezes (no tokens, no
                            events) for --fault-stall-for (0 = until shutdown)
  --fault-exit-after N      exit(3) abruptly after N completed requests, HTTP or gRPC (a crash)
  --fault-health-flap D     /health answers 503 during every other D (the engine keeps serving):
                            a worker whose health check flaps

Flags:
`

// parseFlags parses and checks the command line. --help returns flag.ErrHelp.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{runtime: worker.RuntimeVLLM}
	fs := flag.NewFlagSet("simworker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("simworker: unexpected arguments %q", fs.Args())
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	return o, nil
}

// register defines every flag on fs, writing into o; o's runtime is the --runtime default.
func (o *options) register(fs *flag.FlagSet) {
	d := sim.DefaultConfig()
	fs.StringVar(&o.host, "host", "", "listen address for HTTP and gRPC (empty = all interfaces)")
	fs.IntVar(&o.port, "port", 8000, "HTTP port")
	fs.IntVar(&o.grpcPort, "grpc-port", 0, "gRPC port (0 = no gRPC server)")
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
	fs.StringVar(&o.kvExtraKeys, "kv-extra-keys", "pairs", "multimodal extra_keys of BlockStored: pairs ([mm_hash, offset], vLLM's current form) | ids (bare mm hashes, as vLLM first published them)")
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
	fs.DurationVar(&o.faultHealthFlap, "fault-health-flap", 0, "answer /health 503 during every other period of this length (0 = off)")
	fs.StringVar(&o.replyFile, "reply-file", "", "FILE of JSON strings, one per line: generation n emits exactly the tokens of line n mod N and stops (needs --tokenizer)")
	fs.StringVar(&o.apiKey, "api-key", "", "require Authorization: Bearer KEY on /v1/* (401 {\"error\":\"Unauthorized\"} otherwise, as vLLM's --api-key) and as gRPC authorization metadata")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate: serve HTTP (https://) and gRPC over TLS (with --tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&o.tlsClientCA, "tls-client-ca", "", "PEM CAs: require client certificates signed by them on HTTP and gRPC (mTLS; needs --tls-cert)")
	fs.StringVar(&o.pdRole, "pd-role", "", "prefill or decode: one side of prefill/decode pairs (empty = an aggregated engine)")
	fs.StringVar(&o.pdTransfer, "pd-transfer", "nixl", "KV hand-off of --pd-role: nixl (vLLM NixlConnector), mooncake (vLLM MooncakeConnector) or sglang (bootstrap room)")
	fs.IntVar(&o.pdBootstrapPort, "pd-bootstrap-port", 8998, "port of an sglang or mooncake prefill engine's bootstrap server")
	fs.Float64Var(&o.pdBandwidth, "pd-bandwidth", 25e9, "KV transfer bytes per simulated second")
	fs.IntVar(&o.pdKVBytesPerToken, "pd-kv-bytes-per-token", 262144, "KV bytes of one token (the default is a 32B model's: 64 layers x 8 KV heads x 128 x K,V x 2 bytes)")
	fs.DurationVar(&o.pdLease, "pd-lease", 30*time.Second, "how long a nixl or mooncake prefill engine holds unread blocks (vLLM kv_lease_duration)")
	fs.DurationVar(&o.pdWait, "pd-wait", 300*time.Second, "how long an sglang engine waits for the other side, and a mooncake prefill's bootstrap server for the prefill (SGLang's bootstrap and waiting timeouts)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug|info|warn|error")
}

// check validates the parsed flags and builds the chat parsers they name.
func (o *options) check() error {
	if o.kvFormat != "array" && o.kvFormat != "map" {
		return fmt.Errorf("simworker: --kv-event-format %q: want array or map", o.kvFormat)
	}
	if o.kvExtraKeys != "pairs" && o.kvExtraKeys != "ids" {
		return fmt.Errorf("simworker: --kv-extra-keys %q: want pairs or ids", o.kvExtraKeys)
	}
	if o.kvHash != "int" && o.kvHash != "bytes" {
		return fmt.Errorf("simworker: --kv-hash %q: want int or bytes", o.kvHash)
	}
	if o.dpSize < 1 || o.dpSize > 64 {
		return fmt.Errorf("simworker: --dp-size %d: want 1..64", o.dpSize)
	}
	if o.timeScale <= 0 {
		return fmt.Errorf("simworker: --time-scale %v: must be positive", o.timeScale)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") || (o.tlsClientCA != "" && o.tlsCert == "") {
		return errors.New("simworker: --tls-cert and --tls-key go together, and --tls-client-ca needs them")
	}
	if o.tokenizerPath == "" && (o.chatTemplate != "" || o.reasoningParser != "" || o.toolCallParser != "") {
		return errors.New("simworker: --chat-template, --reasoning-parser and --tool-call-parser need --tokenizer (chat is rendered and decoded with the model's tokenizer)")
	}
	if o.pdRole != "" {
		if o.pdBandwidth <= 0 || o.pdKVBytesPerToken <= 0 || o.pdLease <= 0 || o.pdWait <= 0 || o.pdBootstrapPort < 1 || o.pdBootstrapPort > 65535 {
			return errors.New("simworker: --pd-bandwidth, --pd-kv-bytes-per-token, --pd-lease and --pd-wait must be positive and --pd-bootstrap-port a port")
		}
		o.pd = &sim.PDConfig{Role: o.pdRole, Transfer: o.pdTransfer, Bandwidth: o.pdBandwidth, KVBytesPerToken: o.pdKVBytesPerToken,
			Lease: o.pdLease, Wait: o.pdWait}
	}
	if o.reasoningParser != "" || o.toolCallParser != "" {
		var err error
		if o.parsers, err = parse.NewParsers(o.reasoningParser, o.toolCallParser); err != nil {
			return fmt.Errorf("simworker: %w", err)
		}
	}
	return nil
}
