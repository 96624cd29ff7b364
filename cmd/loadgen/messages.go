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

	"github.com/kvgate/kvgate/pkg/anthropic"
)

// The messages workload: coding-agent sessions on Anthropic's /v1/messages. Every turn sends
// the whole conversation, as Claude Code does: the shared system prompt (text blocks marked
// cache_control, which the gateway accepts and ignores) and tool definitions, then the
// history. When the previous answer used a tool (tool_use blocks), the next turn's user
// message carries a tool_result per call (--tool-tokens tokens), else the session's next
// user message. Whether the model calls a tool is the server's: the simulator scripted with
// --reply-file and --tool-call-parser calls one every other generation, as an agent works.

const workloadMessages = "messages"

// errMessagesNeedsText: like chat, the workload sends text.
var errMessagesNeedsText = errors.New("loadgen: --workload messages sends text: give --tokenizer FILE|DIR instead of --token-ids (a model directory also renders the conversations for the ideal hit rate)")

// codingTools are the tool definitions every turn sends, a coding agent's.
var codingTools = json.RawMessage(`[` +
	`{"name":"read_file","description":"Read a file of the repository and return its contents with line numbers.","input_schema":{"type":"object","properties":{"path":{"type":"string","description":"Path relative to the repository root."},"offset":{"type":"integer","description":"First line to read."},"limit":{"type":"integer","description":"Most lines to read."}},"required":["path"]}},` +
	`{"name":"edit_file","description":"Replace an exact string in a file with another; the old string must occur exactly once.","input_schema":{"type":"object","properties":{"path":{"type":"string"},"old_string":{"type":"string"},"new_string":{"type":"string"}},"required":["path","old_string","new_string"]}},` +
	`{"name":"run_command","description":"Run a shell command in the repository and return its output and exit status.","input_schema":{"type":"object","properties":{"command":{"type":"string"},"timeout_seconds":{"type":"integer"}},"required":["command"]}},` +
	`{"name":"search","description":"Search the repository for a regular expression and return the matching lines.","input_schema":{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"}},"required":["pattern"]}},` +
	`{"name":"lookup","description":"Look up a fact in the knowledge base.","input_schema":{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}}` +
	`]`)

// genMessages builds the sessions as genResponses does: per turn a user message and a tool
// result of its own (the one the turn's input needs is used).
func genMessages(cfg genConfig, m promptMaker) (*plan, error) {
	if m.tb == nil {
		return nil, errMessagesNeedsText
	}
	if cfg.numRequests < 1 || cfg.turns < 1 || cfg.userTokens < 1 || cfg.toolTokens < 1 || cfg.systemTokens < 1 || cfg.outputTokens < 1 {
		return nil, fmt.Errorf("loadgen: messages needs requests ≥ 1, turns ≥ 1, system, user and tool tokens ≥ 1, output tokens ≥ 1")
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 0x6d736773)) // "msgs"
	n := (cfg.numRequests + cfg.turns - 1) / cfg.turns
	at := arrivals(rng, n, cfg.rate, cfg.burstiness)
	p := &plan{system: m.make(rng, cfg.systemTokens), systemTokens: cfg.systemTokens, messages: true,
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
	p.describe = fmt.Sprintf("%s: %d sessions, %d requests, up to %d turns resending the conversation, 5 tools, %d-token system prompt, %d-token user turns, %d-token tool results, up to %d output tokens",
		workloadMessages, n, cfg.numRequests, cfg.turns, cfg.systemTokens, cfg.userTokens, cfg.toolTokens, cfg.outputTokens)
	return p, nil
}

// anthropicMessage is one message of a Messages request: content blocks.
type anthropicMessage struct {
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"content"`
}

// messagesBody is a /v1/messages request: streaming, greedy; the output length is the
// model's, up to max_tokens (an agent's turn ends when it calls a tool or answers).
type messagesBody struct {
	Model       string             `json:"model"`
	MaxTokens   int                `json:"max_tokens"`
	System      []json.RawMessage  `json:"system"`
	Tools       json.RawMessage    `json:"tools"`
	Messages    []anthropicMessage `json:"messages"`
	Temperature float64            `json:"temperature"`
	Stream      bool               `json:"stream"`
}

// textBlock and toolResultBlock are content blocks the client writes.
func textBlock(text string, cache bool) json.RawMessage {
	m := map[string]any{"type": "text", "text": text}
	if cache {
		m["cache_control"] = map[string]string{"type": "ephemeral"}
	}
	b, _ := json.Marshal(m)
	return b
}

func toolResultBlock(id, text string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"type": "tool_result", "tool_use_id": id, "content": text})
	return b
}

// messageResult is what a turn's stream ends with: the answer's content blocks, as the
// client sends them back, and the id of each tool_use block.
type messageResult struct {
	content []json.RawMessage
	toolIDs []string
}

// messageEvent is the part of a Messages stream event the load generator reads.
type messageEvent struct {
	Type         string          `json:"type"`
	Index        int             `json:"index"`
	ContentBlock json.RawMessage `json:"content_block"`
	Delta        struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Thinking    string `json:"thinking"`
		Signature   string `json:"signature"`
		PartialJSON string `json:"partial_json"`
	} `json:"delta"`
	Usage *struct {
		InputTokens          int `json:"input_tokens"`
		OutputTokens         int `json:"output_tokens"`
		CacheReadInputTokens int `json:"cache_read_input_tokens"`
	} `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// block is one content block of the answer being streamed.
type block struct {
	typ, id, name                 string
	text, thinking, signature, in strings.Builder
}

// raw returns the block as the client resends it.
func (b *block) raw() (json.RawMessage, error) {
	switch b.typ {
	case "text":
		return json.Marshal(map[string]string{"type": "text", "text": b.text.String()})
	case "thinking":
		return json.Marshal(map[string]string{"type": "thinking", "thinking": b.thinking.String(), "signature": b.signature.String()})
	case "tool_use":
		in := b.in.String()
		if in == "" {
			in = "{}"
		}
		if !json.Valid([]byte(in)) {
			return nil, fmt.Errorf("tool_use %s: input %q is not JSON", b.id, in)
		}
		return json.Marshal(map[string]any{"type": "tool_use", "id": b.id, "name": b.name, "input": json.RawMessage(in)})
	}
	return nil, fmt.Errorf("unknown content block %q", b.typ)
}

// doMessages sends one streaming /v1/messages body and measures it: TTFT at the first
// content_block_delta; done at message_stop, the usage taken from message_delta (the prompt is
// input_tokens + cache_read_input_tokens, the latter the engine's cached tokens); an error
// event or a stream without message_stop is a failure.
func (c *completer) doMessages(ctx context.Context, start time.Time, body []byte) (o outcome, res messageResult) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		o.err = "request: " + err.Error()
		return o, res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("anthropic-version", "2023-06-01")
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
	var blocks []*block
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue
		}
		var ev messageEvent
		if err := json.Unmarshal(bytes.TrimSpace(data), &ev); err != nil {
			o.err = "bad event: " + err.Error()
			return o, res
		}
		var done bool
		if blocks, done = messageEventApply(&ev, t0, &o, blocks); done {
			if o.ok {
				res, err = resultOf(blocks)
				if err != nil {
					o.ok, o.err = false, err.Error()
				}
			}
			return o, res
		}
	}
	if err := sc.Err(); err != nil {
		o.err = "read: " + shortErr(err)
	} else {
		o.err = "stream ended without message_stop"
	}
	return o, res
}

// messageEventApply applies one event to the outcome and the answer's blocks; true when the
// stream is over.
func messageEventApply(ev *messageEvent, t0 time.Time, o *outcome, blocks []*block) ([]*block, bool) {
	switch ev.Type {
	case "content_block_start":
		var cb struct{ Type, ID, Name string }
		if json.Unmarshal(ev.ContentBlock, &cb) != nil || ev.Index != len(blocks) {
			o.err = "bad content_block_start"
			return blocks, true
		}
		blocks = append(blocks, &block{typ: cb.Type, id: cb.ID, name: cb.Name})
	case "content_block_delta":
		if ev.Index < 0 || ev.Index >= len(blocks) {
			o.err = "content_block_delta of no block"
			return blocks, true
		}
		if o.ttft == 0 && ev.Delta.Type != "signature_delta" {
			o.ttft = time.Since(t0)
		}
		b := blocks[ev.Index]
		b.text.WriteString(ev.Delta.Text)
		b.thinking.WriteString(ev.Delta.Thinking)
		b.signature.WriteString(ev.Delta.Signature)
		b.in.WriteString(ev.Delta.PartialJSON)
	case "message_delta":
		if u := ev.Usage; u != nil {
			o.promptTokens, o.outputTokens, o.cachedTokens = u.InputTokens+u.CacheReadInputTokens, u.OutputTokens, u.CacheReadInputTokens
		}
	case "error":
		o.err = "stream error"
		if ev.Error != nil {
			o.err += ": " + ev.Error.Type + ": " + ev.Error.Message
		}
		return blocks, true
	case "message_stop":
		o.ok = true
		if o.ttft == 0 {
			o.ttft = time.Since(t0) // nothing streamed: the answer was empty
		}
		return blocks, true
	}
	return blocks, false
}

// resultOf turns the streamed blocks into the assistant message's content.
func resultOf(blocks []*block) (messageResult, error) {
	var res messageResult
	for _, b := range blocks {
		raw, err := b.raw()
		if err != nil {
			return res, err
		}
		res.content = append(res.content, raw)
		if b.typ == "tool_use" {
			res.toolIDs = append(res.toolIDs, b.id)
		}
	}
	return res, nil
}

// messagesIDs returns the ids the gateway routes a Messages body on: converted into its chat
// request by pkg/anthropic, the gateway's own conversion, then rendered (chatIDs).
func (r *runner) messagesIDs(body []byte) ([]uint32, error) {
	ar, aerr := anthropic.Parse(body, false)
	if aerr != nil {
		return nil, aerr
	}
	return r.chatIDs.ids(ar.ChatBody())
}

// messagesBodyOf is the body of a turn: the system prompt, the tools and msgs.
func (r *runner) messagesBodyOf(msgs []anthropicMessage, maxTokens int) ([]byte, error) {
	return json.Marshal(messagesBody{Model: r.c.model, MaxTokens: maxTokens, System: []json.RawMessage{textBlock(r.plan.system.text, true)},
		Tools: codingTools, Messages: msgs, Stream: true})
}

// messagesHistoryHit returns how many of ids, a follow-up's, come before the text of its new
// user message: the earlier turns' prompts and answers as this conversation renders them. It
// renders the conversation with the first block of the last message replaced by one whose
// text is "A", and "Z": the renders agree with ids through the block's header and part ways
// at its first token of text.
func (r *runner) messagesHistoryHit(msgs []anthropicMessage, ids []uint32) (int, error) {
	last := msgs[len(msgs)-1]
	var it map[string]any
	if err := json.Unmarshal(last.Content[0], &it); err != nil {
		return 0, err
	}
	hit := len(ids)
	for _, probe := range []string{"A", "Z"} {
		if it["type"] == "tool_result" {
			it["content"] = probe
		} else {
			it["text"] = probe
		}
		b, err := json.Marshal(it)
		if err != nil {
			return 0, err
		}
		content := append([]json.RawMessage{b}, last.Content[1:]...)
		pm := append(msgs[:len(msgs)-1:len(msgs)-1], anthropicMessage{Role: last.Role, Content: content})
		body, err := r.messagesBodyOf(pm, 1)
		if err != nil {
			return 0, err
		}
		p, err := r.messagesIDs(body)
		if err != nil {
			return 0, err
		}
		hit = min(hit, commonPrefix(ids, p))
	}
	return hit, nil
}

// runMessagesSession plays one coding-agent session: each turn resends the conversation, the
// previous answer's blocks as the assistant message, then a user message with a tool_result
// per tool_use of that answer, else the session's next user message. A failed turn ends the
// session.
//
// The ideal (an infinite cache) works on the ids each turn is routed on (the gateway's
// conversion and render): a later turn ideally hits everything before the text of its new user
// message (the earlier prompts and answers, as the template renders them), a session's first
// turn what it shares with the first first turn sent (system prompt, tools, template).
func (r *runner) runMessagesSession(ctx context.Context, start time.Time, s *session) {
	var msgs []anthropicMessage
	var prev messageResult
	for k := range s.users {
		slot := s.first + k
		if k > 0 && r.plan.thinkTime > 0 && !sleepUntil(ctx, time.Now().Add(r.real(r.plan.thinkTime))) {
			return
		}
		var input []json.RawMessage
		for _, id := range prev.toolIDs {
			input = append(input, toolResultBlock(id, s.tools[k]))
		}
		if len(input) == 0 {
			input = []json.RawMessage{textBlock(s.users[k], false)}
		}
		msgs = append(msgs, anthropicMessage{Role: "user", Content: input})
		body, err := r.messagesBodyOf(msgs, r.plan.outputTokens)
		var ids []uint32
		hit := 0
		if err == nil && r.chatIDs != nil {
			if ids, err = r.messagesIDs(body); err == nil {
				if k == 0 {
					hit = r.idealHitOf(0, ids, nil)
				} else {
					hit, err = r.messagesHistoryHit(msgs, ids)
				}
			}
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
		if r.chatIDs != nil {
			r.idealHit.Add(int64(hit))
			r.idealTotal.Add(int64(len(ids)))
		}
		o, res := r.sendMessages(ctx, start, body, len(ids))
		r.release()
		r.record(slot, o)
		if !o.ok {
			return
		}
		prev = res
		if len(res.content) == 0 {
			res.content = []json.RawMessage{textBlock("", false)}
		}
		msgs = append(msgs, anthropicMessage{Role: "assistant", Content: res.content})
	}
}

// sendMessages is send for a /v1/messages turn.
func (r *runner) sendMessages(ctx context.Context, start time.Time, body []byte, tokens int) (outcome, messageResult) {
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	o, res := r.c.doMessages(ctx, start, body)
	if o.promptTokens == 0 {
		o.promptTokens = tokens
	}
	return o, res
}
