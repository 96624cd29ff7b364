package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/worker"
)

// EventConn is implemented by gRPC engines: the connection and runtime on which the worker's own
// SubscribeKvEvents stream runs. It waits until the runtime is known (given by the spec, or
// detected by the first successful health check) or ctx ends.
type EventConn interface {
	EventConn(ctx context.Context) (grpc.ClientConnInterface, worker.Runtime, error)
}

// grpcEngine is one grpc:// worker: one connection, and the runtime's client once the runtime is
// known (from the spec, or detected by probing HealthCheck on each service).
//
// A grpcEngine must not be copied.
type grpcEngine struct {
	w    *worker.Worker
	cfg  Config
	conn *grpc.ClientConn
	// rt holds the runtime and its client once known; detected is closed then.
	rt         atomic.Pointer[runtimeInUse]
	detected   chan struct{}
	detectOnce sync.Once
}

type runtimeInUse struct {
	name worker.Runtime
	c    runtimeClient
}

func newGRPC(w *worker.Worker, cfg Config) (*grpcEngine, error) {
	target := strings.TrimPrefix(w.URL(), "grpc://")
	opts, err := DialOptions(w.Spec())
	if err != nil {
		return nil, err
	}
	key, err := apiKey(w.Spec())
	if err != nil {
		return nil, err
	}
	if key != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerCreds(key)))
	}
	conn, err := grpc.NewClient("passthrough:///"+target, opts...)
	if err != nil {
		return nil, fmt.Errorf("engine: grpc client %s: %w", w.URL(), err)
	}
	e := &grpcEngine{w: w, cfg: cfg, conn: conn, detected: make(chan struct{})}
	if r := w.Spec().Runtime; r != "" {
		e.setRuntime(r)
	}
	return e, nil
}

func (e *grpcEngine) setRuntime(r worker.Runtime) {
	e.rt.Store(&runtimeInUse{name: r, c: runtimeClients[r](e.conn)})
	e.detectOnce.Do(func() { close(e.detected) })
}

// Close implements Engine.
func (e *grpcEngine) Close() { _ = e.conn.Close() }

// Runtime implements Engine.
func (e *grpcEngine) Runtime() worker.Runtime {
	if r := e.rt.Load(); r != nil {
		return r.name
	}
	return ""
}

// client returns the runtime's client, or nil while undetected.
func (e *grpcEngine) client() runtimeClient {
	if r := e.rt.Load(); r != nil {
		return r.c
	}
	return nil
}

// EventConn implements EventConn.
func (e *grpcEngine) EventConn(ctx context.Context) (grpc.ClientConnInterface, worker.Runtime, error) {
	select {
	case <-e.detected:
		return e.conn, e.Runtime(), nil
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
}

// errUndetected: no service answered HealthCheck with anything but UNIMPLEMENTED.
var errUndetected = errors.New("engine: grpc runtime not detected")

// Health implements Engine with HealthCheck. While the runtime is unknown it probes each
// service in turn, and the first one that does not answer UNIMPLEMENTED is the worker's runtime
// (as SMG detects it, wire/smg-grpc.md §8).
func (e *grpcEngine) Health(ctx context.Context) error {
	if c := e.client(); c != nil {
		return checkHealthy(c.health(ctx))
	}
	for _, r := range worker.Runtimes() {
		ok, msg, err := runtimeClients[r](e.conn).health(ctx)
		if status.Code(err) == codes.Unimplemented {
			continue
		}
		if err != nil {
			return fmt.Errorf("engine: grpc health: %w", withTLSHint(err))
		}
		e.setRuntime(r)
		return checkHealthy(ok, msg, nil)
	}
	return errUndetected
}

func checkHealthy(ok bool, msg string, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("engine: grpc health: %w", withTLSHint(err))
	case !ok:
		return fmt.Errorf("engine: grpc health: unhealthy: %s", msg)
	}
	return nil
}

// Load implements Engine with GetLoads (running + waiting over DP ranks).
func (e *grpcEngine) Load(ctx context.Context) (Load, error) {
	c := e.client()
	if c == nil {
		return Load{}, errUndetected
	}
	return c.loads(ctx)
}

// Model implements Engine with GetModelInfo (gRPC engines list no adapters).
func (e *grpcEngine) Model(ctx context.Context) (Model, error) {
	c := e.client()
	if c == nil {
		return Model{}, errUndetected
	}
	name, err := c.modelName(ctx)
	return Model{Name: name}, err
}

// PassOnGRPC is the answer to a forwarded request (Request.Pass) that only gRPC workers could
// take: the engine gRPC interface has no pooling calls.
func PassOnGRPC(path string) *openai.Error {
	return openai.BadRequest("", "POST "+path+" is served by http:// workers only: the engine gRPC interface has no pooling calls, and the model's workers are grpc://")
}

// Generate implements Engine: one Generate per prompt with the gateway's token ids, every call
// started before anything is returned, so a worker that refuses can still be retried elsewhere.
// The body turns the streams into OpenAI completion objects (grpcBody).
func (e *grpcEngine) Generate(ctx context.Context, r *Request) (*Response, error) {
	if r.Pass != nil {
		return nil, PassOnGRPC(r.Pass.Path)
	}
	if e.cfg.Tokenizer == nil {
		return nil, &openai.Error{Status: http.StatusNotImplemented, Type: openai.TypeInvalidRequest, Code: "tokenizer_required",
			Message: "grpc:// workers need the gateway's tokenizer (--model-path or --tokenizer)"}
	}
	if r.Media > 0 {
		return nil, ErrMediaOverGRPC()
	}
	for _, t := range r.Tokens {
		if t == nil {
			return nil, openai.BadRequest("prompt", "prompt could not be tokenized")
		}
	}
	rt := e.rt.Load()
	if rt == nil {
		return nil, &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "runtime_unknown", Message: "worker runtime not detected yet"}
	}
	if aerr := checkPD(rt.name, r.PD); aerr != nil {
		return nil, aerr
	}
	g, p := e.generation(r)
	gctx, cancel := context.WithCancel(outgoingTrace(ctx, r.Header))
	b := newGRPCBody(e, rt, gctx, cancel, r, p)
	for i, toks := range r.Tokens {
		b.ids[i] = b.id + "-" + strconv.Itoa(i)
		g.id, g.tokens, g.prompt = b.ids[i], toks, i
		st, err := rt.c.generate(gctx, &g)
		if err != nil {
			cancel()
			ae := Classify(err)
			if status.Code(err) == codes.Unavailable {
				ae.Cause = &TransportError{Err: err} // the engine is unreachable: mark it down
			}
			return nil, ae
		}
		b.streams[i] = st
	}
	b.start()
	resp := &Response{Status: http.StatusOK, Header: http.Header{}, SSE: p.stream, Body: b}
	if r.PD != nil && r.PD.Prefill {
		resp.KVTransferParams = b.handoff
	}
	if !p.stream {
		resp.Header.Set("Content-Type", "application/json")
	}
	return resp, nil
}

// generation returns the Generate parameters every prompt of r shares and what its body needs:
// a completion decodes with special tokens skipped and defaults max_tokens to OpenAI's 16; a
// chat request leaves max_tokens to the engine when the client gave none (vLLM's default: what
// the context leaves) and decodes as its output parsers need.
func (e *grpcEngine) generation(r *Request) (genRequest, bodyParams) {
	g, p := e.clientGeneration(r)
	g.pd = r.PD
	if r.PD != nil && r.PD.Prefill {
		prefillLeg(&g, &p)
	}
	return g, p
}

// clientGeneration is generation for the client's request as it is; a NIXL prefill leg's
// output is a one-choice, non-streamed answer of it.
func (e *grpcEngine) clientGeneration(r *Request) (genRequest, bodyParams) {
	prefill := r.PD != nil && r.PD.Prefill
	if c := r.Chat; c != nil {
		if prefill {
			leg := *c
			leg.Stream, leg.IncludeUsage, leg.N = false, false, 1
			c = &leg
		}
		skip := true
		if r.ChatOutput.Parsers != nil {
			skip = r.ChatOutput.Parsers.SkipSpecialTokens(r.ChatOutput.Info)
		}
		g := genRequest{stream: c.Stream, maxTokens: c.MaxOutputTokens(), minTokens: c.MinTokens, temperature: c.Temperature,
			topP: c.TopP, n: c.N, stop: c.Stop, stopTokenIDs: c.StopTokenIDs, seed: c.Seed, ignoreEOS: c.IgnoreEOS, skipSpecial: skip}
		return g, bodyParams{output: newChatOutput(c, r.ChatOutput, c.N), stream: c.Stream, n: c.N, stops: c.Stop,
			skipSpecial: skip, idPrefix: "chatcmpl-"}
	}
	c := r.Completion
	if prefill {
		leg := *c
		leg.Stream, leg.IncludeUsage, leg.N = false, false, 1
		c = &leg
	}
	maxTokens := c.MaxTokens
	if maxTokens == 0 {
		maxTokens = openai.DefaultCompletionMaxTokens
	}
	g := genRequest{stream: c.Stream, maxTokens: maxTokens, temperature: c.Temperature, topP: c.TopP, n: c.N,
		stop: c.Stop, stopTokenIDs: c.StopTokenIDs, seed: c.Seed, ignoreEOS: c.IgnoreEOS, skipSpecial: true}
	return g, bodyParams{output: &completionOutput{req: c}, stream: c.Stream, n: c.N, stops: c.Stop, skipSpecial: true, idPrefix: "cmpl-"}
}

// abortAll tells the engine to drop the calls (SMG fires Abort with a 10 s deadline when a
// stream is dropped before its final message, wire/smg-grpc.md §8). Errors are only logged.
func (e *grpcEngine) abortAll(c runtimeClient, ids []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		if err := c.abort(ctx, id); err != nil {
			e.cfg.Logger.Debug("abort failed", zap.String("worker", e.w.URL()), zap.String("request_id", id), zap.Error(err))
		}
	}
}

var (
	_ Engine    = (*grpcEngine)(nil)
	_ EventConn = (*grpcEngine)(nil)
)
