package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/kvgate/kvgate/pkg/conversation"
	"github.com/kvgate/kvgate/pkg/openai"
)

// The responses workload: agent sessions on /v1/responses. A session is --turns requests,
// each continuing the previous one by previous_response_id (the server keeps the state), with
// one function tool offered: when the answer calls it, the next turn's input is the tool's
// result (a function_call_output per call, --tool-tokens tokens), else a new user message.
// Whether the model calls the tool is the server's: a simulator scripted with --reply-file
// and --tool-call-parser (cmd/simworker) alternates calls and answers as an agent does.

const workloadResponses = "responses"

// errResponsesNeedsText: like chat, the workload sends text.
var errResponsesNeedsText = errors.New("loadgen: --workload responses sends text: give --tokenizer FILE|DIR instead of --token-ids (a model directory also renders the conversations for the ideal hit rate)")

// agentTool is the function tool every turn offers.
var agentTool = json.RawMessage(`[{"type":"function","name":"lookup","description":"Look up a fact in the knowledge base.","parameters":{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}}]`)

// genResponses builds the sessions as genChat does, each turn with a user message and a tool
// result of its own (the one its input needs is used).
func genResponses(cfg genConfig, m promptMaker) (*plan, error) {
	if m.tb == nil {
		return nil, errResponsesNeedsText
	}
	if cfg.numRequests < 1 || cfg.turns < 1 || cfg.userTokens < 1 || cfg.toolTokens < 1 || cfg.systemTokens < 0 || cfg.outputTokens < 1 {
		return nil, fmt.Errorf("loadgen: responses needs requests ≥ 1, turns ≥ 1, user and tool tokens ≥ 1, output tokens ≥ 1")
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 0x72657370)) // "resp"
	n := (cfg.numRequests + cfg.turns - 1) / cfg.turns
	at := arrivals(rng, n, cfg.rate, cfg.burstiness)
	p := &plan{system: m.make(rng, cfg.systemTokens), systemTokens: cfg.systemTokens, agent: true,
		thinkTime: cfg.thinkTime, outputTokens: cfg.outputTokens}
	next := 0
	for s := range n {
		turns := min(cfg.turns, cfg.numRequests-next)
		sess := &session{id: s, at: at[s], first: next}
		for range turns {
			sess.users = append(sess.users, m.make(rng, cfg.userTokens).text)
			sess.tools = append(sess.tools, m.make(rng, cfg.toolTokens).text)
		}
		next += turns
		p.sessions = append(p.sessions, sess)
	}
	p.describe = fmt.Sprintf("%s: %d sessions, %d requests, up to %d turns by previous_response_id, one function tool, %d-token instructions, %d-token user turns, %d-token tool results, up to %d output tokens",
		workloadResponses, n, cfg.numRequests, cfg.turns, cfg.systemTokens, cfg.userTokens, cfg.toolTokens, cfg.outputTokens)
	return p, nil
}

// responsesBody is a /v1/responses request: streaming, stored (the next turn continues it),
// greedy. The output length is the model's, up to max_output_tokens: an agent's turn ends
// when it calls a tool or answers (no ignore_eos).
type responsesBody struct {
	Model           string            `json:"model,omitempty"`
	Instructions    string            `json:"instructions,omitempty"`
	Input           []json.RawMessage `json:"input"`
	PreviousID      string            `json:"previous_response_id,omitempty"`
	Tools           json.RawMessage   `json:"tools"`
	MaxOutputTokens int               `json:"max_output_tokens"`
	Temperature     float64           `json:"temperature"`
	Stream          bool              `json:"stream"`
	Store           *bool             `json:"store,omitempty"`
}

// userItem and toolOutput are input items.
func userItem(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"type": "message", "role": "user", "content": text})
	return b
}

func toolOutput(callID, text string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"type": "function_call_output", "call_id": callID, "output": text})
	return b
}

// responseResult is what a turn's stream ends with: the response's id and output items.
type responseResult struct {
	id     string
	output []json.RawMessage
	calls  []string // call_id of each function_call item, in order
}

// responseEvent is the part of a Responses stream event the load generator reads.
type responseEvent struct {
	Type     string `json:"type"`
	Message  string `json:"message"`
	Response *struct {
		ID     string            `json:"id"`
		Status string            `json:"status"`
		Output []json.RawMessage `json:"output"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
		Usage *struct {
			InputTokens        int `json:"input_tokens"`
			OutputTokens       int `json:"output_tokens"`
			InputTokensDetails *struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		} `json:"usage"`
	} `json:"response"`
}

// doResponses sends one streaming /v1/responses body and measures it: TTFT at the first
// delta of output text, reasoning or function-call arguments; done at response.completed (or
// .incomplete), whose response gives the id, output and usage; response.failed, an error
// event or a stream without a terminal event is a failure.
func (c *completer) doResponses(ctx context.Context, start time.Time, body []byte) (o outcome, res responseResult) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		o.err = "request: " + err.Error()
		return o, res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	t0 := time.Now()
	defer func() {
		o.e2e = time.Since(t0)
		o.end = time.Since(start)
	}()
	resp, err := c.client.Do(req)
	if err != nil {
		o.err = "transport: " + shortErr(err)
		return o, res
	}
	defer resp.Body.Close()
	o.worker = resp.Header.Get("x-kvgate-worker")
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		o.err = fmt.Sprintf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
		return o, res
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue
		}
		var ev responseEvent
		if err := json.Unmarshal(bytes.TrimSpace(data), &ev); err != nil {
			o.err = "bad event: " + err.Error()
			return o, res
		}
		if done := c.responseEvent(&ev, t0, &o, &res); done {
			return o, res
		}
	}
	if err := sc.Err(); err != nil {
		o.err = "read: " + shortErr(err)
	} else {
		o.err = "stream ended without response.completed"
	}
	return o, res
}

// responseEvent applies one event to the outcome; true when the stream is over.
func (c *completer) responseEvent(ev *responseEvent, t0 time.Time, o *outcome, res *responseResult) bool {
	switch ev.Type {
	case "response.output_text.delta", "response.reasoning_text.delta", "response.function_call_arguments.delta":
		if o.ttft == 0 {
			o.ttft = time.Since(t0)
		}
		return false
	case "error":
		o.err = "stream error: " + ev.Message
		return true
	case "response.failed":
		o.err = "response failed"
		if r := ev.Response; r != nil && r.Error != nil {
			o.err += ": " + r.Error.Message
		}
		return true
	case "response.completed", "response.incomplete":
	default:
		return false
	}
	r := ev.Response
	if r == nil || r.ID == "" {
		o.err = ev.Type + " without a response"
		return true
	}
	o.ok = true
	if o.ttft == 0 {
		o.ttft = time.Since(t0) // nothing streamed: the answer was empty
	}
	if u := r.Usage; u != nil {
		o.promptTokens, o.outputTokens = u.InputTokens, u.OutputTokens
		if u.InputTokensDetails != nil {
			o.cachedTokens = u.InputTokensDetails.CachedTokens
		}
	}
	res.id, res.output = r.ID, r.Output
	for _, it := range r.Output {
		var item struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
		}
		if json.Unmarshal(it, &item) == nil && item.Type == "function_call" {
			res.calls = append(res.calls, item.CallID)
		}
	}
	return true
}

// agentIDs renders a whole agent conversation as the gateway runs it, for the ideal: the
// conversation's items sent at once (no previous_response_id, store: false) are expanded by
// pkg/conversation, the gateway's own conversion, into the chat request, whose ids chatIDs
// computes. A stored chain renders to the same ids as the conversation sent whole
// (pkg/conversation's golden test), so these are the ids each turn is routed on.
type agentIDs struct {
	chat *chatIDs
	svc  *conversation.Service
}

func newAgentIDs(c *chatIDs) (*agentIDs, error) {
	if c == nil {
		return nil, nil
	}
	st, err := conversation.NewMemory(conversation.MemoryConfig{})
	if err != nil {
		return nil, err
	}
	svc, err := conversation.New(conversation.Config{Store: st})
	if err != nil {
		return nil, err
	}
	return &agentIDs{chat: c, svc: svc}, nil
}

// ids returns the ids of the conversation items under instructions, ending with the
// template's generation prompt (the turn about to be answered).
func (a *agentIDs) ids(instructions string, items []json.RawMessage) ([]uint32, error) {
	no := false
	body, err := json.Marshal(responsesBody{Instructions: instructions, Input: items, Tools: agentTool, MaxOutputTokens: 1, Store: &no})
	if err != nil {
		return nil, err
	}
	req, aerr := openai.ParseResponses(body, openai.Limits{})
	if aerr != nil {
		return nil, aerr
	}
	t, aerr := a.svc.Begin(context.Background(), "", req)
	if aerr != nil {
		return nil, aerr
	}
	return a.chat.ids(t.ChatBody(nil, 0))
}

// historyHit returns how many of ids, a follow-up's (history then input), come before the
// text of its input: the previous turns' prompts and answers as this conversation renders
// them. It renders the history followed by the first input item with its text replaced by
// "A", and by "Z": the renders agree with ids through the item's header and part ways at its
// first token of text (which cannot be both).
func (a *agentIDs) historyHit(instructions string, history []json.RawMessage, first json.RawMessage, ids []uint32) (int, error) {
	var it map[string]any
	if err := json.Unmarshal(first, &it); err != nil {
		return 0, err
	}
	hit := len(ids)
	for _, probe := range []string{"A", "Z"} {
		if _, ok := it["output"]; ok {
			it["output"] = probe
		} else {
			it["content"] = probe
		}
		b, err := json.Marshal(it)
		if err != nil {
			return 0, err
		}
		p, err := a.ids(instructions, append(history[:len(history):len(history)], b))
		if err != nil {
			return 0, err
		}
		hit = min(hit, commonPrefix(ids, p))
	}
	return hit, nil
}

// runAgentSession plays one agent session: each turn continues the previous response by
// previous_response_id, its input the tool results the previous answer asked for, else the
// session's next user message. A failed turn ends the session.
//
// The ideal (an infinite cache) works on the ids each turn is routed on (agentIDs): a turn
// ideally hits everything before the text of its input, i.e. the previous turns' prompts and
// answers (the engine generated the answers, so it holds them where the template renders them
// as the model produced them; a template that rewrites an earlier answer, as Qwen3's drops the
// reasoning of turns before the last user message, makes a real cache hit less), and a
// session's first turn what it shares with the first first turn sent (instructions, tools,
// template).
func (r *runner) runAgentSession(ctx context.Context, start time.Time, s *session) {
	var history []json.RawMessage // the conversation before this turn's input, for the ideal
	var prev responseResult
	for k := range s.users {
		slot := s.first + k
		if k > 0 && r.plan.thinkTime > 0 && !sleepUntil(ctx, time.Now().Add(r.real(r.plan.thinkTime))) {
			return
		}
		var input []json.RawMessage
		for _, id := range prev.calls {
			input = append(input, toolOutput(id, s.tools[k]))
		}
		if len(input) == 0 {
			input = []json.RawMessage{userItem(s.users[k])}
		}
		body, err := json.Marshal(responsesBody{Model: r.c.model, Instructions: r.plan.system.text, Input: input, PreviousID: prev.id,
			Tools: agentTool, MaxOutputTokens: r.plan.outputTokens, Stream: true})
		var ids []uint32
		hit := 0
		if err == nil && r.agentIDs != nil {
			hit, ids, err = r.agentIdeal(k, history, input)
		}
		if err != nil {
			r.sent[slot] = true
			r.record(slot, outcome{err: "render: " + err.Error()})
			return
		}
		if !r.acquire(ctx) {
			return
		}
		r.sent[slot] = true
		if r.agentIDs != nil {
			r.idealHit.Add(int64(hit))
			r.idealTotal.Add(int64(len(ids)))
		}
		o, res := r.sendResponses(ctx, start, body, len(ids))
		r.release()
		r.record(slot, o)
		if !o.ok {
			return
		}
		prev = res
		history = append(append(history, input...), res.output...)
	}
}

// agentIdeal returns the ideal hit and the ids of turn k, input after history.
func (r *runner) agentIdeal(k int, history, input []json.RawMessage) (int, []uint32, error) {
	instr := r.plan.system.text
	ids, err := r.agentIDs.ids(instr, append(history[:len(history):len(history)], input...))
	if err != nil {
		return 0, nil, err
	}
	if k == 0 {
		return r.idealHitOf(0, ids, nil), ids, nil
	}
	hit, err := r.agentIDs.historyHit(instr, history, input[0], ids)
	return hit, ids, err
}

// sendResponses is send for a /v1/responses turn.
func (r *runner) sendResponses(ctx context.Context, start time.Time, body []byte, tokens int) (outcome, responseResult) {
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	o, res := r.c.doResponses(ctx, start, body)
	if o.promptTokens == 0 {
		o.promptTokens = tokens
	}
	return o, res
}
