package endpoint

import (
	"runtime"
	"slices"
	"sync"
	"weak"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/anthropic"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// A Messages request with thinking {type: disabled} asks the chat template for no thinking
// with a reasoning_effort, and which one depends on the template, as in vLLM's Anthropic
// serving (serving.py, _probe_disabled_thinking_effort with --anthropic-disabled-thinking-
// effort auto, its default): "none" (which also sets enable_thinking false), unless the
// template rejects it or renders it the same as one of the thinking efforts (GLM treats an
// unknown effort as its most thorough), then "low". The gateway finds out as vLLM does, once
// per model and only when a request disables thinking, by rendering a one-message probe
// conversation with each effort and comparing the prompts.

// disabledEfforts caches each served model's effort for disabled thinking, a memo of the
// model's immutable renderer like inlineModes; an entry goes with its model's pipeline state.
var disabledEfforts = &effortCache{m: map[weak.Pointer[pipeline.Served]]*effortEntry{}}

// effortCache must not be copied.
type effortCache struct {
	// mu guards m; it is never held while probing.
	mu sync.Mutex
	m  map[weak.Pointer[pipeline.Served]]*effortEntry
}

// effortEntry is one model's effort, probed once (concurrent first requests wait for it).
type effortEntry struct {
	once   sync.Once
	chat   pipeline.ChatRenderer
	effort string
}

// effort returns the reasoning_effort for disabled thinking of the model c is resolved to. A
// model without a chat template gets "none": nothing the gateway renders depends on it, and
// the worker, which renders then, probes for itself.
func (ec *effortCache) effort(c *pipeline.Call, log *zap.Logger) string {
	if c.Served == nil || c.Served.Chat == nil {
		return "none"
	}
	key := weak.Make(c.Served)
	ec.mu.Lock()
	e := ec.m[key]
	if e == nil || e.chat != c.Served.Chat {
		if e == nil {
			runtime.AddCleanup(c.Served, ec.forget, key)
		}
		e = &effortEntry{chat: c.Served.Chat}
		ec.m[key] = e
	}
	ec.mu.Unlock()
	e.once.Do(func() {
		e.effort = probeDisabledEffort(e.chat)
		if log != nil {
			log.Info("anthropic thinking.type=disabled maps to reasoning_effort", zap.String("model", c.Target.Model), zap.String("reasoning_effort", e.effort))
		}
	})
	return e.effort
}

func (ec *effortCache) forget(key weak.Pointer[pipeline.Served]) {
	ec.mu.Lock()
	delete(ec.m, key)
	ec.mu.Unlock()
}

// thinkingEfforts are vLLM's AnthropicEffort values, in its order.
var thinkingEfforts = []string{"low", "medium", "high", "xhigh", "max"}

// probeDisabledEffort is vLLM's probe: "low" when the conversation does not render with
// reasoning_effort none, or renders as it does with one of the thinking efforts; else "none".
func probeDisabledEffort(chat pipeline.ChatRenderer) string {
	none, ok := renderEffortProbe(chat, "none")
	if !ok {
		return "low"
	}
	for _, e := range thinkingEfforts {
		if p, ok := renderEffortProbe(chat, e); ok && p.prompt == none.prompt && slices.Equal(p.ids, none.ids) {
			return "low"
		}
	}
	return "none"
}

type effortPrompt struct {
	prompt string
	ids    []uint32
}

// renderEffortProbe renders vLLM's probe request, [{"role":"user","content":"Hi"}] with the
// effort; ok is false when the renderer refuses it.
func renderEffortProbe(chat pipeline.ChatRenderer, effort string) (effortPrompt, bool) {
	body := append([]byte(`{"model":"probe","messages":[{"role":"user","content":"Hi"}],"reasoning_effort":`), openai.AppendString(nil, effort)...)
	req, aerr := openai.ParseChat(append(body, '}'), openai.Limits{})
	if aerr != nil {
		return effortPrompt{}, false
	}
	res, aerr := chat.Render(req)
	if aerr != nil || res.Unrendered != "" {
		return effortPrompt{}, false
	}
	return effortPrompt{res.Prompt, res.TokenIDs}, true
}

// placeMessages gives c the chat request its model gets of ar, after Resolve: with the
// model's effort for disabled thinking and its inline system messages placed
// (placeInlineSystem), as vLLM's create_messages converts the request once both are resolved.
func placeMessages(c *pipeline.Call, ar *anthropic.Request, lim openai.Limits, log *zap.Logger) *openai.Error {
	if ar.DisabledThinking() {
		if e := disabledEfforts.effort(c, log); e != "none" {
			ar.SetDisabledThinkingEffort(e)
			cr, aerr := openai.ParseChat(ar.ChatBody(), lim)
			if aerr != nil {
				return aerr
			}
			c.Req.Chat = cr
		}
	}
	return placeInlineSystem(c, ar, lim, log)
}
