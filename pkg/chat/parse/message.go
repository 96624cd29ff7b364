package parse

// The parsed output: increments of a streamed message and the whole message.

// Delta is one streamed increment of an assistant message. Empty strings mean "nothing of that
// kind in this increment"; a Delta with no field set carries nothing and need not be sent.
type Delta struct {
	Reasoning string
	Content   string
	ToolCalls []ToolCallDelta
}

// Empty reports whether d carries nothing.
func (d Delta) Empty() bool { return d.Reasoning == "" && d.Content == "" && len(d.ToolCalls) == 0 }

// ToolCallDelta is one entry of a streamed delta's tool_calls. A call's first entry carries
// Index, ID, Type ("function") and Name and no arguments; later entries carry Index and an
// Arguments fragment only, as vLLM's server streams them.
type ToolCallDelta struct {
	Index     int
	ID        string
	Type      string
	Name      string
	Arguments string
}

// Message is a whole parsed assistant message. A nil Content or Reasoning is JSON null.
type Message struct {
	Content   *string
	Reasoning *string
	ToolCalls []ToolCall
}

// ToolCall is one parsed tool call; Arguments is the JSON text sent as function.arguments.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}
