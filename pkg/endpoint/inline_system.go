package endpoint

import (
	"encoding/json"
	"runtime"
	"slices"
	"strings"
	"sync"
	"weak"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// Where system messages inside a Messages conversation go depends on the model's chat
// template, as in vLLM's Anthropic serving (entrypoints/anthropic/inline_system.py,
// InlineSystemModeResolver with --anthropic-inline-system auto, its default): a template
// that renders a system message anywhere in the conversation as a turn of its own keeps them
// in place (anthropic.Request.ChatBody), any other folds them into their neighbours
// (FoldedChatBody). Which it is, the gateway finds out as vLLM does, once per model, by
// rendering small probe conversations with and without an inline system message (probeInline)
// and comparing their token ids; only a request that has something to fold asks.

// inlineModes caches each served model's placement. It is a memo of a function of the model's
// immutable renderer and tokenizer, so the one value shared by every endpoint is harmless; an
// entry goes when its model's pipeline state is collected (a reload builds new ones).
var inlineModes = &inlineCache{m: map[weak.Pointer[pipeline.Served]]*inlineMode{}}

// inlineCache must not be copied.
type inlineCache struct {
	// mu guards m; it is never held while probing.
	mu sync.Mutex
	m  map[weak.Pointer[pipeline.Served]]*inlineMode
}

// inlineMode is one model's placement, probed once (concurrent first requests wait for it).
type inlineMode struct {
	once   sync.Once
	chat   pipeline.ChatRenderer
	fold   bool
	reason string
}

// foldInline reports whether the model c is resolved to folds inline system messages. A
// model without a chat template folds, as vLLM folds when its probe cannot render.
func (ic *inlineCache) foldInline(c *pipeline.Call, log *zap.Logger) bool {
	if c.Served == nil || c.Served.Chat == nil || c.Served.Tok == nil {
		return true
	}
	key := weak.Make(c.Served)
	ic.mu.Lock()
	e := ic.m[key]
	if e == nil || e.chat != c.Served.Chat {
		if e == nil {
			runtime.AddCleanup(c.Served, ic.forget, key)
		}
		e = &inlineMode{chat: c.Served.Chat}
		ic.m[key] = e
	}
	ic.mu.Unlock()
	e.once.Do(func() {
		e.fold, e.reason = probeInline(e.chat, c.Served.Tok)
		if log != nil {
			how := "kept in place"
			if e.fold {
				how = "folded into adjacent turns"
			}
			log.Info("anthropic inline system messages "+how, zap.String("model", c.Target.Model), zap.String("reason", e.reason))
		}
	})
	return e.fold
}

func (ic *inlineCache) forget(key weak.Pointer[pipeline.Served]) {
	ic.mu.Lock()
	delete(ic.m, key)
	ic.mu.Unlock()
}

// The probe's texts each start and end with a distinct word, so that the segment an inserted
// message adds, found by matching the common prefix and suffix, starts exactly at it.
const (
	probeSystem    = "Alpha leading instructions"
	probeUser1     = "Bravo first question"
	probeAnswer    = "Charlie first answer"
	probeUser2     = "Delta second question"
	probeInlineMsg = "Echo inline note"
	probeReasoning = "Foxtrot prior reasoning"
)

const probeTool = `{"type":"function","function":{"name":"probe_tool","description":"Probe tool.","parameters":{"type":"object","properties":{}}}}`

// probeCase is a conversation and the index the inline system message is inserted at.
type probeCase struct {
	name string
	msgs []map[string]any
	at   int
}

func probeCases() []probeCase {
	sys := map[string]any{"role": "system", "content": probeSystem}
	user := map[string]any{"role": "user", "content": probeUser1}
	return []probeCase{
		{"mid", []map[string]any{sys, user, {"role": "assistant", "content": probeAnswer}, {"role": "user", "content": probeUser2}}, 3},
		{"after_tool", []map[string]any{sys, user,
			{"role": "assistant", "reasoning": probeReasoning, "tool_calls": []any{map[string]any{"id": "probe0001", "type": "function", "function": map[string]any{"name": "probe_tool", "arguments": "{}"}}}},
			{"role": "tool", "tool_call_id": "probe0001", "content": "Golf output"}}, 4},
		{"trailing", []map[string]any{sys, user}, 2},
	}
}

// prober renders probe conversations with one model's renderer and tokenizer.
type prober struct {
	chat pipeline.ChatRenderer
	tok  pipeline.Tokenizer
}

// probeInline finds out whether the template renders an inline system message as a turn of
// its own (fold false) and says why not otherwise: vLLM's _Prober.probe, for each
// reasoning_effort it tries ("high", as Claude Code sends, then none), on each probe case.
func probeInline(chat pipeline.ChatRenderer, tok pipeline.Tokenizer) (fold bool, reason string) {
	p := &prober{chat, tok}
	var evaluated [][]uint32
	for _, effort := range []string{"high", ""} {
		var cases []probeCase
		var bases [][]uint32
		for _, pc := range probeCases() {
			base := p.render(pc.msgs, effort)
			if base == nil && hasReasoning(pc.msgs) {
				// Some renderers reject reasoning in history; probe without it.
				pc.msgs = withoutReasoning(pc.msgs)
				base = p.render(pc.msgs, effort)
			}
			if base == nil {
				break
			}
			cases, bases = append(cases, pc), append(bases, base)
		}
		if len(bases) != len(probeCases()) || slices.EqualFunc(bases, evaluated, slices.Equal[[]uint32]) {
			continue
		}
		evaluated = bases
		for i := range cases {
			if why := p.check(cases[i], bases[i], effort); why != "" {
				if effort == "" {
					effort = "None"
				}
				return true, why + " (reasoning_effort=" + effort + ")"
			}
		}
	}
	if evaluated == nil {
		return true, "the probe conversations could not be rendered"
	}
	return false, "the renderer marks them as distinct system turns"
}

// check returns why an inline system message inserted into pc is unsafe to keep, or "".
func (p *prober) check(pc probeCase, base []uint32, effort string) string {
	inline := map[string]any{"role": "system", "content": probeInlineMsg}
	base, next, pos, seg, found := p.insert(pc, base, inline, effort)
	switch {
	case next == nil:
		return pc.name + ": renderer rejects it"
	case !strings.Contains(p.decode(next, false), probeInlineMsg):
		return pc.name + ": renderer drops it"
	case !found:
		return pc.name + ": rendering it changes other parts of the prompt"
	case pc.at == len(pc.msgs) && pos >= len(base):
		return pc.name + ": it lands after the generation prompt"
	case strings.Count(p.decode(seg, false), probeInlineMsg) != 1:
		return pc.name + ": it is not rendered as its own segment"
	case p.decode(seg, false) == p.decode(seg, true):
		return pc.name + ": it has no role marker"
	}
	if pc.name == "mid" {
		asUser := map[string]any{"role": "user", "content": probeInlineMsg}
		if _, _, _, userSeg, ok := p.insert(pc, base, asUser, effort); ok && slices.Equal(userSeg, seg) {
			return pc.name + ": it renders the same as a user message"
		}
	}
	if strings.Contains(p.decode(base, false), probeReasoning) != strings.Contains(p.decode(next, false), probeReasoning) {
		return pc.name + ": it changes which reasoning is kept"
	}
	return ""
}

// insert renders pc with m inserted at pc.at and finds the segment it adds to base. When
// there is none it renders base once more, in case the template put the current date in it.
func (p *prober) insert(pc probeCase, base []uint32, m map[string]any, effort string) (b, next []uint32, pos int, seg []uint32, found bool) {
	with := slices.Concat(pc.msgs[:pc.at], []map[string]any{m}, pc.msgs[pc.at:])
	next = p.render(with, effort)
	if next == nil {
		return base, nil, 0, nil, false
	}
	pos, seg, found = insertion(base, next)
	if !found {
		if again := p.render(pc.msgs, effort); again != nil && !slices.Equal(again, base) {
			base = again
			if next = p.render(with, effort); next == nil {
				return base, nil, 0, nil, false
			}
			pos, seg, found = insertion(base, next)
		}
	}
	return base, next, pos, seg, found
}

// insertion returns (p, seg) when next is base[:p] + seg + base[p:].
func insertion(base, next []uint32) (int, []uint32, bool) {
	n := min(len(base), len(next))
	p := 0
	for p < n && base[p] == next[p] {
		p++
	}
	s := 0
	for s < n-p && base[len(base)-1-s] == next[len(next)-1-s] {
		s++
	}
	if p+s != len(base) {
		return 0, nil, false
	}
	return p, next[p : len(next)-s], true
}

// render renders a probe conversation with the probe tool; nil when the renderer refuses it.
func (p *prober) render(msgs []map[string]any, effort string) []uint32 {
	body := map[string]any{"model": "probe", "messages": msgs, "tools": []json.RawMessage{json.RawMessage(probeTool)}}
	if effort != "" {
		body["reasoning_effort"] = effort
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil
	}
	req, aerr := openai.ParseChat(b, openai.Limits{})
	if aerr != nil {
		return nil
	}
	res, aerr := p.chat.Render(req)
	if aerr != nil || res.Unrendered != "" || len(res.TokenIDs) == 0 {
		return nil
	}
	return res.TokenIDs
}

// decode is the text of ids, special tokens skipped or kept. A segment whose two decodings
// are equal holds no special token: no role marker. (vLLM also counts added tokens that are
// not special; role markers are special in every tokenizer the gateway loads.)
func (p *prober) decode(ids []uint32, skipSpecial bool) string {
	d := p.tok.NewDecoder(skipSpecial)
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(d.Add(id))
	}
	b.WriteString(d.Flush())
	return b.String()
}

func hasReasoning(msgs []map[string]any) bool {
	return slices.ContainsFunc(msgs, func(m map[string]any) bool { _, ok := m["reasoning"]; return ok })
}

func withoutReasoning(msgs []map[string]any) []map[string]any {
	out := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		out[i] = make(map[string]any, len(m))
		for k, v := range m {
			if k != "reasoning" {
				out[i][k] = v
			}
		}
	}
	return out
}
