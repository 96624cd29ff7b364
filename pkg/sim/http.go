package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
)

// ServerConfig configures the simulator's OpenAI-compatible HTTP surface.
type ServerConfig struct {
	// Model is the served model name; requests naming another model get 404.
	Model string
	// Codec tokenizes text prompts and detokenizes output; nil accepts token-id prompts only.
	Codec TextCodec
	// DefaultMaxTokens applies when a completion request omits max_tokens (default 16, as
	// vLLM's /v1/completions); a chat request without one may fill the context, as in vLLM.
	DefaultMaxTokens int
	// MaxBodyBytes bounds request bodies (default 32 MiB); larger ones get 413.
	MaxBodyBytes int64
	// OnCompleted, when set, is called after every completion request that ran to its end
	// (used by the exit fault switch).
	OnCompleted func()
	// Replies, when set, scripts every generation's output (see Replies).
	Replies *Replies
	// Chat renders /v1/chat/completions requests with the model's chat template (a
	// *chat.Renderer, which tokenizes with the model's tokenizer: pair it with a Codec of the
	// same tokenizer); nil answers them 400, as vLLM does for a model without a template.
	Chat ChatRenderer
	// ChatParsers splits reasoning and tool calls out of chat output, as vLLM's
	// --reasoning-parser and --tool-call-parser do; nil: all text is content.
	ChatParsers *parse.Parsers
	// HealthFlap, when > 0, makes /health answer 503 during every other period of this length
	// from the server's start, while everything else goes on serving: a worker whose health
	// check flaps (the --fault-health-flap switch). 0: /health always answers 200.
	HealthFlap time.Duration
	// PD, when set, makes the server the prefill or decode side of prefill/decode pairs
	// (pd.go); nil: an aggregated engine.
	PD *PDConfig
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
}

// Server serves /v1/completions, /v1/chat/completions, /v1/models, the pooling endpoints
// /v1/embeddings and /rerank (http_pooling.go), the audio uploads (http_audio.go), /health, /metrics,
// /debug/cache and /reset_prefix_cache over a set of engine ranks, spreading requests by least
// load. Both generation routes run their prompt ids through the same engines.
type Server struct {
	cfg      ServerConfig
	ranks    Ranks
	gatherer prometheus.Gatherer
	log      *zap.Logger
	mux      *http.ServeMux
	created  int64
	started  time.Time // for HealthFlap
	nextID   atomic.Uint64
	pd       *pdState // nil without ServerConfig.PD
	traces   traceLog // GET /debug/traceparents
}

// NewServer returns a server over ranks; gatherer backs /metrics (nil: no /metrics).
func NewServer(cfg ServerConfig, ranks Ranks, gatherer prometheus.Gatherer) (*Server, error) {
	if cfg.Model == "" || len(ranks) == 0 {
		return nil, fmt.Errorf("sim: new server: model %q with %d ranks: %w", cfg.Model, len(ranks), ErrBadConfig)
	}
	if cfg.DefaultMaxTokens == 0 {
		cfg.DefaultMaxTokens = 16
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	now := time.Now()
	s := &Server{cfg: cfg, ranks: ranks, gatherer: gatherer, log: cfg.Logger, mux: http.NewServeMux(), created: now.Unix(), started: now}
	if cfg.PD != nil {
		pd, err := newPDState(*cfg.PD)
		if err != nil {
			return nil, err
		}
		s.pd = pd
		if pd.cfg.Role == PDRolePrefill && pd.cfg.Transfer == PDTransferNIXL {
			s.mux.HandleFunc("GET /pd/nixl/{id}", s.handleNIXLRead)
		}
	}
	s.mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("POST /v1/embeddings", s.handleEmbeddings)
	for _, p := range []string{"/rerank", "/v1/rerank", "/v2/rerank"} {
		s.mux.HandleFunc("POST "+p, s.handleRerank)
	}
	s.mux.HandleFunc("POST /pooling", s.handlePooling)
	s.mux.HandleFunc("POST /classify", s.handleClassify)
	s.mux.HandleFunc("POST /score", s.handleScore)
	s.mux.HandleFunc("POST /v1/score", s.handleScore)
	s.mux.HandleFunc("POST /v1/audio/transcriptions", s.handleAudio)
	s.mux.HandleFunc("POST /v1/audio/translations", s.handleAudio)
	s.mux.HandleFunc("GET /health", s.handleHealth)
	s.mux.HandleFunc("GET /debug/cache", s.handleDebugCache)
	s.mux.HandleFunc("GET /debug/traceparents", s.handleTraceparents)
	s.mux.HandleFunc("POST /reset_prefix_cache", s.handleReset)
	if gatherer != nil {
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	return s, nil
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// apiError is an OpenAI-shaped error.
type apiError struct {
	status int
	msg    string
	param  string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, a ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, a...)}
}

func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusRequestEntityTooLarge:
		return "RequestEntityTooLargeError"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	}
	return "InternalServerError"
}

func errorJSON(e *apiError) []byte {
	var param any
	if e.param != "" {
		param = e.param
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": e.msg, "type": errorType(e.status), "param": param, "code": e.status,
	}})
	return b
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_, _ = w.Write(errorJSON(e))
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if f := s.cfg.HealthFlap; f > 0 && (time.Since(s.started)/f)%2 == 1 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	cfg := s.ranks[0].Config()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"object": "list",
		"data": []any{map[string]any{
			"id": s.cfg.Model, "object": "model", "created": s.created, "owned_by": "vllm",
			"root": s.cfg.Model, "parent": nil, "max_model_len": cfg.MaxModelLen,
		}},
	})
}

// DebugCache is the body of GET /debug/cache: the folded hashes of every block each rank
// currently holds in its prefix cache.
type DebugCache struct {
	Model     string           `json:"model"`
	BlockSize int              `json:"block_size"`
	Ranks     []DebugCacheRank `json:"ranks"`
}

// DebugCacheRank is one rank's part of DebugCache.
type DebugCacheRank struct {
	Rank      int      `json:"rank"`
	NumBlocks int      `json:"num_blocks"`
	Hashes    []uint64 `json:"hashes"`
}

func (s *Server) handleDebugCache(w http.ResponseWriter, _ *http.Request) {
	out := DebugCache{Model: s.cfg.Model, BlockSize: s.ranks[0].Config().BlockSize}
	for _, e := range s.ranks {
		out.Ranks = append(out.Ranks, DebugCacheRank{Rank: e.Rank(), NumBlocks: e.Config().NumBlocks, Hashes: e.AppendCached([]uint64{})})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	for _, e := range s.ranks {
		if !e.ResetPrefixCache() {
			writeError(w, &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("rank %d: cannot reset the prefix cache while requests are running", e.Rank())})
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// completionRequest is the subset of the OpenAI (and vLLM extension) fields the simulator
// honours; sampling knobs are accepted and ignored.
type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	N             *int            `json:"n"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Seed           *int64          `json:"seed"`
	Stop           json.RawMessage `json:"stop"`
	StopTokenIDs   []uint32        `json:"stop_token_ids"`
	IgnoreEOS      bool            `json:"ignore_eos"`
	MinTokens      *int            `json:"min_tokens"`
	ReturnTokenIDs bool            `json:"return_token_ids"`
	Temperature    *float64        `json:"temperature"`
	TopP           *float64        `json:"top_p"`
	User           string          `json:"user"`
}

// parsedRequest is a validated completion or chat completion request: what the engine runs.
type parsedRequest struct {
	prompts [][]uint32
	// media are a chat prompt's media items (expandMedia), keyed into its blocks.
	media        []indexer.ExtraSpan
	n, maxTokens int
	minTokens    int
	ignoreEOS    bool
	stop         []string
	stopIDs      []uint32
	seed         *int64
	stream       bool
	includeUsage bool
	returnIDs    bool
	// keepSpecial decodes the output with special tokens kept (chat output parsers whose
	// markers are special tokens); completions skip them, as vLLM does by default.
	keepSpecial bool
	// pd holds the transfer fields (servers with a pair role), job what the role does
	// around the generation, remote the prompt tokens whose KV arrived by transfer.
	pd     *pdFields
	job    *pdJob
	remote int
}

// readBody reads a request body within MaxBodyBytes.
func (s *Server) readBody(r *http.Request) ([]byte, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body larger than %d bytes", s.cfg.MaxBodyBytes)}
		}
		return nil, badRequest("read body: %v", err)
	}
	return body, nil
}

// checkModel answers 404 for a request naming another model ("" names the served one).
func (s *Server) checkModel(model string) *apiError {
	if model != "" && model != s.cfg.Model {
		return &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("The model `%s` does not exist.", model), param: "model"}
	}
	return nil
}

// checkMinTokens applies vLLM's SamplingParams rules to min_tokens.
func checkMinTokens(p *parsedRequest) *apiError {
	switch {
	case p.minTokens < 0:
		return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("min_tokens must be greater than or equal to 0, got %d.", p.minTokens), param: "min_tokens"}
	case p.minTokens > p.maxTokens:
		return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("min_tokens must be less than or equal to max_tokens=%d, got %d.", p.maxTokens, p.minTokens), param: "min_tokens"}
	}
	return nil
}

// checkPrompts checks every prompt's ids against the vocabulary and the context length
// (param names the request field the prompt came from).
func (s *Server) checkPrompts(p *parsedRequest, param string) *apiError {
	cfg := s.ranks[0].Config()
	for _, ids := range p.prompts {
		for _, id := range ids {
			if int(id) >= cfg.VocabSize {
				return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("Token id %d is out of vocabulary", id), param: param}
			}
		}
		if len(ids)+p.maxTokens > cfg.MaxModelLen {
			return &apiError{status: http.StatusBadRequest, param: param, msg: fmt.Sprintf(
				"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
				cfg.MaxModelLen, len(ids)+p.maxTokens, len(ids), p.maxTokens)}
		}
	}
	return nil
}

func (s *Server) parse(r *http.Request) (*parsedRequest, *apiError) {
	body, aerr := s.readBody(r)
	if aerr != nil {
		return nil, aerr
	}
	var req completionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, badRequest("invalid JSON body: %v", err)
	}
	if aerr := s.checkModel(req.Model); aerr != nil {
		return nil, aerr
	}
	p := &parsedRequest{n: 1, maxTokens: s.cfg.DefaultMaxTokens, seed: req.Seed, stream: req.Stream,
		stopIDs: req.StopTokenIDs, returnIDs: req.ReturnTokenIDs, ignoreEOS: req.IgnoreEOS}
	if req.StreamOptions != nil {
		if !req.Stream {
			return nil, &apiError{status: http.StatusBadRequest, msg: "stream_options is only allowed when stream is true", param: "stream_options"}
		}
		p.includeUsage = req.StreamOptions.IncludeUsage
	}
	if req.N != nil {
		if *req.N < 1 || *req.N > maxN {
			return nil, &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("n must be between 1 and %d, got %d", maxN, *req.N), param: "n"}
		}
		p.n = *req.N
	}
	if req.MaxTokens != nil {
		if *req.MaxTokens < 1 {
			return nil, &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("max_tokens must be at least 1, got %d", *req.MaxTokens), param: "max_tokens"}
		}
		p.maxTokens = *req.MaxTokens
	}
	if req.MinTokens != nil {
		p.minTokens = *req.MinTokens
	}
	if aerr := checkMinTokens(p); aerr != nil {
		return nil, aerr
	}
	var err error
	if p.stop, err = parseStop(req.Stop); err != nil {
		return nil, &apiError{status: http.StatusBadRequest, msg: err.Error(), param: "stop"}
	}
	if p.prompts, err = s.parsePrompt(req.Prompt); err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return nil, ae
		}
		return nil, &apiError{status: http.StatusBadRequest, msg: err.Error(), param: "prompt"}
	}
	if aerr := s.checkPrompts(p, "prompt"); aerr != nil {
		return nil, aerr
	}
	if s.pd != nil {
		if p.pd, aerr = parsePDFields(body); aerr != nil {
			return nil, aerr
		}
	}
	return p, nil
}

func parseStop(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, errors.New("stop must be a string or a list of strings")
	}
	out := many[:0]
	for _, s := range many {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// parsePrompt accepts a string, a list of strings, a list of token ids or a list of lists of
// token ids.
func (s *Server) parsePrompt(raw json.RawMessage) ([][]uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errors.New("prompt is required")
	}
	switch raw[0] {
	case '"':
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, fmt.Errorf("prompt: %w", err)
		}
		ids, err := s.encode(text)
		if err != nil {
			return nil, err
		}
		return [][]uint32{ids}, nil
	case '[':
	default:
		return nil, errors.New("prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids")
	}
	// Decide the list's shape from its first element instead of decoding it twice.
	first := bytes.TrimSpace(raw[1:])
	if len(first) == 0 || first[0] == ']' {
		return nil, errors.New("prompt must not be empty")
	}
	switch {
	case len(first) > 0 && first[0] == '"':
		var texts []string
		if err := json.Unmarshal(raw, &texts); err != nil {
			return nil, fmt.Errorf("prompt: mixed list: %w", err)
		}
		out := make([][]uint32, 0, len(texts))
		for _, t := range texts {
			ids, err := s.encode(t)
			if err != nil {
				return nil, err
			}
			out = append(out, ids)
		}
		return out, nil
	case len(first) > 0 && first[0] == '[':
		var lists [][]uint32
		if err := json.Unmarshal(raw, &lists); err != nil {
			return nil, fmt.Errorf("prompt: token id lists: %w", err)
		}
		for _, l := range lists {
			if len(l) == 0 {
				return nil, errors.New("prompt: empty token id list")
			}
		}
		return lists, nil
	default:
		var ids []uint32
		if err := json.Unmarshal(raw, &ids); err != nil {
			return nil, fmt.Errorf("prompt: token ids must be non-negative integers: %w", err)
		}
		return [][]uint32{ids}, nil
	}
}

func (s *Server) encode(text string) ([]uint32, error) {
	if s.cfg.Codec == nil {
		return nil, errors.New("text prompts need a tokenizer (start simworker with --tokenizer); send token ids instead")
	}
	ids, err := s.cfg.Codec.Encode(text)
	if err != nil {
		return nil, fmt.Errorf("tokenize prompt: %w", err)
	}
	if len(ids) == 0 {
		return nil, errors.New("prompt tokenizes to zero tokens")
	}
	return ids, nil
}

// choice is one (prompt, sample) sequence of a completion request.
type choice struct {
	index   int
	req     *Request
	stream  *Stream
	detok   Detokenizer
	ids     []uint32 // every output id
	idsSent int      // ids already streamed (return_token_ids)
	text    []byte   // decoded text not yet sent (streaming) or all text (non-streaming)
	all     []byte   // all decoded text, kept only when stop strings must be matched
	scanned int      // bytes of all already searched for stop strings
	finish  string
	info    Info
	ended   bool // finish seen and everything emitted
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.traces.note(r)
	p, aerr := s.parse(r)
	if aerr == nil {
		p.job, aerr = s.pdStart(r.Context(), p)
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	g, aerr := s.submit(p, "cmpl-", "prompt")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var err error
	if p.stream {
		err = s.streamCompletions(r.Context(), w, p, g)
	} else {
		err = s.waitCompletions(r.Context(), w, p, g)
	}
	s.pdEnd(p.job, g, err)
	s.end(g, err)
}

// generation is one HTTP request's engine requests: every (prompt, sample) choice on one rank,
// all signalling ready.
type generation struct {
	id      string
	eng     *Engine
	choices []*choice
	ready   chan struct{}
}

// submit queues every choice of p on the least-loaded rank under a fresh response id with
// idPrefix; on failure nothing stays queued. param names the prompt's field in errors.
func (s *Server) submit(p *parsedRequest, idPrefix, param string) (*generation, *apiError) {
	g := &generation{
		id:    idPrefix + strconv.FormatUint(s.nextID.Add(1), 16) + strconv.FormatInt(time.Now().UnixNano()&0xffffff, 16),
		eng:   s.ranks.Pick(),
		ready: make(chan struct{}, 1),
	}
	g.choices = make([]*choice, 0, len(p.prompts)*p.n)
	for pi, prompt := range p.prompts {
		for k := range p.n {
			req := &Request{
				ID: g.id + "-" + strconv.Itoa(len(g.choices)), Prompt: prompt, MaxTokens: p.maxTokens,
				StopTokenIDs: p.stopIDs, MinTokens: p.minTokens, IgnoreEOS: p.ignoreEOS,
				Seed: seedFor(prompt, p.seed, k), Script: s.cfg.Replies.Next(),
				HoldKV: p.job != nil && p.job.holdKV, RemoteTokens: p.remote, Media: p.media,
			}
			st, err := g.eng.Submit(req, p.stream || len(p.stop) > 0, g.ready)
			if err != nil {
				g.abort()
				status := http.StatusBadRequest
				if errors.Is(err, ErrStopped) {
					status = http.StatusServiceUnavailable
				}
				return nil, &apiError{status: status, msg: err.Error(), param: param}
			}
			c := &choice{index: pi*p.n + k, req: req, stream: st}
			if s.cfg.Codec != nil {
				c.detok = s.cfg.Codec.NewDetokenizer(!p.keepSpecial)
			} else {
				c.detok = &wordDetok{}
			}
			g.choices = append(g.choices, c)
		}
	}
	return g, nil
}

// abort drops every choice still in the engine.
func (g *generation) abort() {
	for _, c := range g.choices {
		g.eng.Abort(c.req)
	}
}

// end finishes a request whose response was written (err nil) or failed.
func (s *Server) end(g *generation, err error) {
	if err != nil {
		g.abort()
		return
	}
	if s.cfg.OnCompleted != nil {
		s.cfg.OnCompleted()
	}
}

// poll drains every choice's stream; it returns true when all choices ended.
func (s *Server) poll(p *parsedRequest, eng *Engine, choices []*choice, buf []uint32) ([]uint32, bool) {
	all := true
	maxStop := 0
	for _, st := range p.stop {
		maxStop = max(maxStop, len(st))
	}
	for _, c := range choices {
		if c.finish != "" {
			continue
		}
		var done bool
		buf, c.info, done = c.stream.Take(buf[:0])
		if len(buf) > 0 {
			c.ids = append(c.ids, buf...)
			piece := c.detok.Add(buf)
			c.text = append(c.text, piece...)
			if maxStop > 0 {
				c.all = append(c.all, piece...)
				from := max(0, c.scanned-maxStop+1)
				if at, ok := findStop(c.all[from:], p.stop); ok {
					// Drop the stop string and everything after it from the text still to send.
					cut := from + at
					extra := len(c.all) - cut
					c.text = c.text[:max(0, len(c.text)-extra)]
					c.all = c.all[:cut]
					c.finish = "stop"
					eng.Abort(c.req)
					continue
				}
				c.scanned = len(c.all)
			}
		}
		if done {
			c.finish = c.info.FinishReason
		} else {
			all = false
		}
	}
	return buf, all
}

func findStop(b []byte, stops []string) (int, bool) {
	best := -1
	for _, st := range stops {
		if i := bytes.Index(b, []byte(st)); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return best, best >= 0
}

// abortMessage answers a request whose generation the engine's shutdown aborted.
const abortMessage = "request aborted: the engine is shutting down"

// wait polls g's choices until every one has finished, for a non-streaming answer. A choice
// the engine's shutdown aborted is answered with a 503 and ErrStopped; an ended ctx returns
// its error.
func (s *Server) wait(ctx context.Context, w http.ResponseWriter, p *parsedRequest, g *generation) error {
	var buf []uint32
	for {
		var done bool
		buf, done = s.poll(p, g.eng, g.choices, buf)
		if done {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-g.ready:
		}
	}
	for _, c := range g.choices {
		if c.finish == "abort" {
			writeError(w, &apiError{status: http.StatusServiceUnavailable, msg: abortMessage})
			return ErrStopped
		}
	}
	return nil
}

// stopHold is how many trailing bytes of a choice's text streaming holds back until the choice
// finishes, because a stop string may start there: the longest stop string's length less one.
func stopHold(stops []string) int {
	hold := 0
	for _, st := range stops {
		hold = max(hold, len(st)-1)
	}
	return hold
}

// streamChoices appends to b, for each choice not yet ended, what emit appends for the text the
// choice may send now (all of it once it finished, else all but its last hold bytes: see
// stopHold), drops that text from the choice and marks a finished choice ended. emit must not
// keep text. When the engine's shutdown aborted a choice, it appends the error event instead
// and returns ErrStopped: the caller writes b and ends the stream.
func streamChoices(b []byte, choices []*choice, hold int, emit func(b []byte, c *choice, text []byte) []byte) ([]byte, error) {
	for _, c := range choices {
		if c.ended {
			continue
		}
		if c.finish == "abort" {
			return appendSSEError(b, abortMessage), ErrStopped
		}
		send := len(c.text)
		if c.finish == "" {
			send = max(0, send-hold)
		}
		b = emit(b, c, c.text[:send])
		c.text = c.text[:copy(c.text, c.text[send:])]
		if c.finish != "" {
			c.ended = true
		}
	}
	return b, nil
}

func (s *Server) waitCompletions(ctx context.Context, w http.ResponseWriter, p *parsedRequest, g *generation) error {
	if err := s.wait(ctx, w, p, g); err != nil {
		return err
	}
	type choiceJSON struct {
		Index        int      `json:"index"`
		Text         string   `json:"text"`
		Logprobs     any      `json:"logprobs"`
		FinishReason string   `json:"finish_reason"`
		StopReason   any      `json:"stop_reason"`
		TokenIDs     []uint32 `json:"token_ids,omitempty"`
	}
	out := struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Created int64        `json:"created"`
		Model   string       `json:"model"`
		Choices []choiceJSON `json:"choices"`
		Usage   usageJSON    `json:"usage"`
		// KV is a NIXL prefill's handoff (wire/pd.md §2.3).
		KV json.RawMessage `json:"kv_transfer_params,omitempty"`
	}{ID: g.id, Object: "text_completion", Created: time.Now().Unix(), Model: s.cfg.Model, Usage: usageOf(p, g.choices), KV: s.handoff(p.job, g)}
	for _, c := range g.choices {
		cj := choiceJSON{Index: c.index, Text: string(c.text), FinishReason: c.finish}
		if p.returnIDs {
			cj.TokenIDs = c.ids
		}
		out.Choices = append(out.Choices, cj)
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(out)
}

type usageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	TotalTokens         int `json:"total_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// usageOf sums prompt and cached tokens once per prompt (from its first sample, like vLLM)
// and completion tokens over every choice.
func usageOf(p *parsedRequest, choices []*choice) usageJSON {
	var u usageJSON
	for i, c := range choices {
		if i%p.n == 0 {
			u.PromptTokens += len(c.req.Prompt)
			u.PromptTokensDetails.CachedTokens += c.info.CachedTokens
		}
		u.CompletionTokens += len(c.ids)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

func (s *Server) streamCompletions(ctx context.Context, w http.ResponseWriter, p *parsedRequest, g *generation) error {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	created := strconv.FormatInt(time.Now().Unix(), 10)
	hold := stopHold(p.stop)
	emit := func(b []byte, c *choice, text []byte) []byte {
		if len(text) == 0 && c.finish == "" {
			return b
		}
		b = s.appendChunk(b, g.id, created, c, text, p.returnIDs)
		c.idsSent = len(c.ids)
		return b
	}
	var buf []uint32
	var out []byte
	for {
		var done bool
		buf, done = s.poll(p, g.eng, g.choices, buf)
		var err error
		if out, err = streamChoices(out[:0], g.choices, hold, emit); err != nil {
			_, _ = sendStep(ctx, w, rc, out, true, nil) // the error event; the stream ends with err whatever the write gives
			return err
		}
		if done && p.includeUsage {
			out = append(out, `data: {"id":"`...)
			out = append(out, g.id...)
			out = append(out, `","object":"text_completion","created":`...)
			out = append(out, created...)
			out = append(out, `,"model":`...)
			out = openai.AppendString(out, s.cfg.Model)
			u, _ := json.Marshal(usageOf(p, g.choices))
			out = append(out, `,"choices":[],"usage":`...)
			out = append(out, u...)
			out = append(out, "}\n\n"...)
		}
		if done {
			out = openai.AppendDone(out)
		}
		if end, err := sendStep(ctx, w, rc, out, done, g.ready); end {
			return err
		}
	}
}

// sendStep writes one engine step's events and, unless the stream is done, waits for the
// next step. It reports whether the stream has ended (done, a failed write, or ctx ended) and
// why.
func sendStep(ctx context.Context, w io.Writer, rc *http.ResponseController, b []byte, done bool, ready <-chan struct{}) (bool, error) {
	if len(b) > 0 {
		if _, err := w.Write(b); err != nil {
			return true, err
		}
		if err := rc.Flush(); err != nil {
			return true, err
		}
	}
	if done {
		return true, nil
	}
	select {
	case <-ctx.Done():
		return true, ctx.Err()
	case <-ready:
		return false, nil
	}
}

// appendChunk appends one SSE event carrying text for choice c.
func (s *Server) appendChunk(b []byte, id, created string, c *choice, text []byte, withIDs bool) []byte {
	b = append(b, `data: {"id":"`...)
	b = append(b, id...)
	b = append(b, `","object":"text_completion","created":`...)
	b = append(b, created...)
	b = append(b, `,"model":`...)
	b = openai.AppendString(b, s.cfg.Model)
	b = append(b, `,"choices":[{"index":`...)
	b = strconv.AppendInt(b, int64(c.index), 10)
	b = append(b, `,"text":`...)
	b = openai.AppendString(b, string(text))
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	if c.finish != "" {
		b = openai.AppendString(b, c.finish)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"stop_reason":null`...)
	if withIDs {
		b = append(b, `,"token_ids":`...)
		b = openai.AppendTokenArray(b, c.ids[c.idsSent:])
	}
	b = append(b, "}],\"usage\":null}\n\n"...)
	return b
}

func appendSSEError(b []byte, msg string) []byte {
	b = append(b, "data: "...)
	b = append(b, errorJSON(&apiError{status: http.StatusServiceUnavailable, msg: msg})...)
	b = append(b, "\n\n"...)
	return b
}
