package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/worker"
)

// NewTransport returns the transport for HTTP workers, shared by all of them: requests, health
// checks, model discovery and metric scrapes. Environment proxies are ignored (workers are
// addressed directly) and compression is off so that bodies pass through unchanged.
func NewTransport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
}

// httpEngine is an OpenAI-compatible HTTP worker.
type httpEngine struct {
	w  *worker.Worker
	rt http.RoundTripper
	c  *http.Client
	// own is the worker's own transport when its spec asks for its own TLS configuration
	// (closed by Close), else nil and rt is the shared one.
	own *http.Transport
	// auth is the Authorization header sent on every call ("" without an api_key).
	auth string
}

func newHTTP(w *worker.Worker, cfg Config) (*httpEngine, error) {
	rt, own, err := httpTransport(w.Spec(), cfg.HTTP)
	if err != nil {
		return nil, err
	}
	key, err := apiKey(w.Spec())
	if err != nil {
		return nil, err
	}
	e := &httpEngine{w: w, rt: rt, c: &http.Client{Transport: rt}, own: own}
	if key != "" {
		e.auth = "Bearer " + key
	}
	return e, nil
}

func (e *httpEngine) Runtime() worker.Runtime { return "" }

// Close releases the worker's own transport, if it has one; the shared one is its owner's.
func (e *httpEngine) Close() {
	if e.own != nil {
		e.own.CloseIdleConnections()
	}
}

func (e *httpEngine) get(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.w.URL()+path, nil)
	if err != nil {
		return nil, err
	}
	e.authorize(req)
	resp, err := e.c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("engine: get %s: %w", path, withTLSHint(stripURL(err)))
	}
	return resp, nil
}

// authorize sets the worker's key on req (DESIGN.md §11): every call carries it, and nothing
// of the client's credentials.
func (e *httpEngine) authorize(req *http.Request) {
	if e.auth != "" {
		req.Header.Set("Authorization", e.auth)
	}
}

// Health implements Engine: GET /health answers 200.
func (e *httpEngine) Health(ctx context.Context) error {
	resp, err := e.get(ctx, "/health")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("engine: health: status %d", resp.StatusCode)
	}
	return nil
}

// Model implements Engine from GET /v1/models (splitModels says which card is the base).
func (e *httpEngine) Model(ctx context.Context) (Model, error) {
	resp, err := e.get(ctx, "/v1/models")
	if err != nil {
		return Model{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Model{}, fmt.Errorf("engine: models: status %d", resp.StatusCode)
	}
	var body struct {
		Data []modelCard `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return Model{}, fmt.Errorf("engine: models: %w", err)
	}
	name, adapters := splitModels(body.Data)
	return Model{Name: name, Adapters: adapters}, nil
}

// Load implements Engine from the engine's Prometheus /metrics (parseEngineLoad).
func (e *httpEngine) Load(ctx context.Context) (Load, error) {
	resp, err := e.get(ctx, "/metrics")
	if err != nil {
		return Load{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Load{}, fmt.Errorf("engine: metrics: status %d", resp.StatusCode)
	}
	return parseEngineLoad(io.LimitReader(resp.Body, 16<<20))
}

// Generate implements Engine: POST /v1/completions or /v1/chat/completions with the client's
// body, model renamed (and, for completions with ForwardTokenIDs, the token ids as the prompt;
// a chat body is always the client's: the engine renders it itself). A transport failure or a
// 5xx before any byte is returned for a retry; a 4xx is the engine's answer to bad input and is
// passed through.
func (e *httpEngine) Generate(ctx context.Context, r *Request) (*Response, error) {
	engineModel := e.w.UpstreamModel(r.Model)
	path, body, stream := upstreamBody(r, engineModel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.w.URL()+path, bytes.NewReader(body))
	if err != nil {
		return nil, Classify(err)
	}
	if r.Pass != nil {
		req.Header.Set("Content-Type", r.Pass.ContentType())
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range forwardHeaders {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	for k, v := range r.SetHeader {
		req.Header[k] = v
	}
	injectTrace(ctx, req.Header)
	e.authorize(req)
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := e.rt.RoundTrip(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		err = withTLSHint(err)
		return nil, &openai.Error{Status: http.StatusBadGateway, Message: "worker unreachable: " + err.Error(), Type: openai.TypeUpstream,
			Code: "upstream_unreachable", Cause: &TransportError{Err: err}}
	}
	if resp.StatusCode >= 500 {
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "upstream_error",
			Message: fmt.Sprintf("worker answered %d: %s", resp.StatusCode, strings.TrimSpace(string(snippet)))}
	}
	return newHTTPResponse(resp, newModelRewriter(engineModel, r.Model)), nil
}

// upstreamBody returns the path and body of r for the engine, and whether it streams.
func upstreamBody(r *Request, engineModel string) (path string, body []byte, stream bool) {
	if p := r.Pass; p != nil {
		return p.Path, p.AppendUpstream(make([]byte, 0, p.BodyLen()+64), engineModel), p.Stream
	}
	if c := r.Chat; c != nil {
		return "/v1/chat/completions", c.AppendUpstream(make([]byte, 0, c.BodyLen()+64), engineModel, r.Edits), editedStream(r.Edits, c.Stream)
	}
	c := r.Completion
	return "/v1/completions", c.AppendUpstream(make([]byte, 0, c.BodyLen()+64), engineModel, forwarded(r), r.Edits), editedStream(r.Edits, c.Stream)
}

// editedStream returns whether a call with edits streams, given the client's stream.
func editedStream(edits openai.Edits, stream bool) bool {
	if v, ok := edits.Lookup("stream"); ok {
		return string(v) == "true"
	}
	return stream
}

// forwarded returns the token ids to send as the prompt, or nil to send the client's prompt.
func forwarded(r *Request) [][]uint32 {
	if !r.ForwardTokenIDs {
		return nil
	}
	for _, t := range r.Tokens {
		if t == nil { // a text prompt that was not tokenized: send the text
			return nil
		}
	}
	return r.Tokens
}

// newHTTPResponse wraps an engine's answer: its content type, its length when the bytes pass
// through unchanged, and a body that gives the client back the model name it asked for (rw;
// nil when the names agree).
func newHTTPResponse(resp *http.Response, rw *modelRewriter) *Response {
	ct := resp.Header.Get("Content-Type")
	out := &Response{Status: resp.StatusCode, Header: http.Header{}, SSE: strings.HasPrefix(ct, "text/event-stream")}
	if ct != "" {
		out.Header.Set("Content-Type", ct)
	}
	b := &httpBody{resp: resp, out: out}
	switch {
	case rw != nil && out.SSE:
		b.sse = &sseRewriter{r: rw}
	case rw != nil && strings.HasPrefix(ct, "application/json"):
		b.json = rw
	}
	if resp.ContentLength >= 0 && !out.SSE && b.json == nil {
		out.Header.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	out.Body = b
	return out
}

// httpBody copies an engine's answer in reads of up to copyBufSize, rewriting the model name.
type httpBody struct {
	resp *http.Response
	out  *Response
	buf  *[]byte        // from copyPool, returned by Close
	sse  *sseRewriter   // event stream to rewrite line by line
	json *modelRewriter // JSON body to rewrite whole (up to maxRewriteBody)
	err  error          // the read error to report once the bytes before it are out
}

const copyBufSize = 32 << 10

// copyPool holds the buffers HTTP bodies are read into: one per response in flight, so a
// request does not allocate 32 KiB (a measured p99 cost through GC, BenchmarkGatewayOverhead).
var copyPool = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

func (b *httpBody) Next() ([]byte, error) {
	if b.json != nil {
		return b.nextJSON()
	}
	if b.buf == nil {
		b.buf = copyPool.Get().(*[]byte)
	}
	buf := *b.buf
	for b.err == nil {
		n, err := b.resp.Body.Read(buf)
		out := buf[:n]
		if b.sse != nil {
			out = b.sse.feed(out)
			if err != nil {
				// The stream's last line, or the partial one an error cuts.
				out = append(append([]byte(nil), out...), b.sse.rest()...)
			}
		}
		b.err = err
		if len(out) > 0 {
			return out, nil
		}
	}
	return nil, b.err
}

// nextJSON reads the whole body, rewrites its model once and returns it with its new length; a
// body longer than maxRewriteBody passes through unchanged.
func (b *httpBody) nextJSON() ([]byte, error) {
	rw := b.json
	b.json = nil
	body, err := io.ReadAll(io.LimitReader(b.resp.Body, maxRewriteBody+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxRewriteBody {
		return body, nil // too large to hold: the rest streams as the engine sent it
	}
	out := rw.appendRewritten(make([]byte, 0, len(body)+len(rw.to)), body)
	b.out.Header.Set("Content-Length", strconv.Itoa(len(out)))
	b.err = io.EOF
	return out, nil
}

// Close implements Body; the last piece Next returned is no longer valid.
func (b *httpBody) Close() {
	b.resp.Body.Close()
	if b.buf != nil {
		copyPool.Put(b.buf)
		b.buf = nil
	}
}

var _ Engine = (*httpEngine)(nil)
