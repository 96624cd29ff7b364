package parse

// emitter collects one Feed's output and hands it out as a Delta. Tool-call ids are made here
// from the injected rand: "chatcmpl-tool-" + 32 lowercase hex like vLLM's make_tool_call_id
// (vllm/entrypoints/chat_utils.py, a uuid4 hex), or 9 ASCII letters and digits for the mistral
// parser (MistralToolCall.generate_random_id, vllm/tool_parsers/mistral_tool_parser.py).
type emitter struct {
	rand       func() uint64
	mistralIDs bool
	callIDs    bool // "call_" + 24 hex digits (qwen3_coder's _generate_tool_call_id)

	reasoning []byte
	content   []byte
	calls     []ToolCallDelta
	args      []byte // arguments of calls[len-1] when it is an arguments entry
	argsOpen  bool
	ncalls    int
}

func (e *emitter) addReasoning(b []byte) { e.reasoning = append(e.reasoning, b...) }

func (e *emitter) addContent(b []byte) { e.content = append(e.content, b...) }

func (e *emitter) addContentString(s string) { e.content = append(e.content, s...) }

// startCall opens tool call number ncalls and returns its index.
func (e *emitter) startCall(name string) int { return e.startCallID(name, "") }

// startCallID is startCall with the call's id given by the model (kimi_k2), "" to make one.
func (e *emitter) startCallID(name, id string) int {
	e.closeArgs()
	idx := e.ncalls
	e.ncalls++
	if id == "" {
		id = e.newID()
	}
	e.calls = append(e.calls, ToolCallDelta{Index: idx, ID: id, Type: "function", Name: name})
	return idx
}

// addArgs appends an arguments fragment of call idx.
func (e *emitter) addArgs(idx int, b []byte) {
	if len(b) == 0 {
		return
	}
	if !e.argsOpen || e.calls[len(e.calls)-1].Index != idx {
		e.closeArgs()
		e.calls = append(e.calls, ToolCallDelta{Index: idx})
		e.argsOpen = true
	}
	e.args = append(e.args, b...)
}

func (e *emitter) closeArgs() {
	if e.argsOpen {
		e.calls[len(e.calls)-1].Arguments = string(e.args)
		e.args = e.args[:0]
		e.argsOpen = false
	}
}

func (e *emitter) take() Delta {
	var d Delta
	if len(e.reasoning) > 0 {
		d.Reasoning = string(e.reasoning)
		e.reasoning = e.reasoning[:0]
	}
	if len(e.content) > 0 {
		d.Content = string(e.content)
		e.content = e.content[:0]
	}
	if len(e.calls) > 0 {
		e.closeArgs()
		d.ToolCalls = e.calls
		e.calls = nil
	}
	return d
}

const hexDigits = "0123456789abcdef"

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func (e *emitter) newID() string {
	if e.mistralIDs {
		var b [9]byte
		for i := range b {
			b[i] = alnum[e.rand()%uint64(len(alnum))]
		}
		return string(b[:])
	}
	var b [len("chatcmpl-tool-") + 32]byte
	prefix, digits := "chatcmpl-tool-", 32
	if e.callIDs {
		prefix, digits = "call_", 24
	}
	n := copy(b[:], prefix)
	for k := 0; k < 2; k++ {
		r := e.rand()
		for i := 0; i < 16; i++ {
			b[n] = hexDigits[r>>60]
			r <<= 4
			n++
		}
	}
	return string(b[:len(prefix)+digits])
}
