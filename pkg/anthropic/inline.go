package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kvgate/kvgate/pkg/openai"
)

// System messages inside messages ("inline" ones: Claude Code adds one on almost every turn)
// are placed by vLLM's rules (entrypoints/anthropic/inline_system.py, normalize_inline_system),
// which only ever change the end of the conversation, so that each turn still renders as an
// extension of the one before (hoisting them into the leading system message would change the
// prompt's head every turn and defeat prefix caching):
//   - the system messages that lead messages join the system prompt, each one's text after it,
//     "\n\n" between them (empty texts skipped), in both modes;
//   - a system message between an assistant's tool_use and the user message answering it moves
//     after that user message (or, if an assistant comes first, before that assistant);
//   - preserve (the model's template renders a system message in place as its own turn, which
//     the endpoint probes): the others stay in place, each as a system message whose content is
//     its text, its text blocks joined without a separator (Claude Code's billing header and
//     empty texts dropped); a request without any system prompt (neither "system" nor leading
//     system messages) is folded all the same, because some templates render the request's
//     tools at the first system message wherever it is;
//   - fold: each one's text joins a neighbour, "\n\n" between texts: the user message just
//     before it (its own text, or the last tool_result's content when it holds only tool
//     results); else, after an assistant, the start of the next user message, or a new user
//     message before the next assistant or at the end. Text joins an adjacent text block rather
//     than adding a block, since some templates concatenate blocks without a separator.

// inlineMsg is a message of the conversation after placement; at is its index in the client's
// messages, which errors name.
type inlineMsg struct {
	wireMessage
	at int
}

// placed is the conversation of a request in both modes; fold is nil when it equals preserve.
type placed struct {
	leading        string
	preserve, fold []inlineMsg
}

// placeInline places the messages' system messages in both modes. It validates only what it
// reads (roles, and system messages' content); the converter validates the rest.
func placeInline(msgs []wireMessage, hasSystemPrompt bool) (*placed, *openai.Error) {
	all := make([]inlineMsg, len(msgs))
	inline := false
	for i := range msgs {
		all[i] = inlineMsg{msgs[i], i}
		switch msgs[i].Role {
		case "system":
			inline = true
		case "user", "assistant":
		default:
			return nil, badRole(i, msgs[i].Role)
		}
	}
	if !inline {
		return &placed{preserve: all}, nil
	}
	n := 0
	var lead []string
	for ; n < len(all) && all[n].Role == "system"; n++ {
		t, aerr := inlineSystemText(&all[n].wireMessage, n)
		if aerr != nil {
			return nil, aerr
		}
		lead = append(lead, t)
	}
	p := &placed{leading: joinTexts(lead...)}
	rest := moveOutOfToolRuns(all[n:])
	folded, aerr := foldInline(rest)
	if aerr != nil {
		return nil, aerr
	}
	if hasSystemPrompt || p.leading != "" {
		p.preserve = rest
		if hasInlineSystem(rest) {
			p.fold = folded
		}
	} else {
		p.preserve = folded
	}
	return p, nil
}

func badRole(i int, role string) *openai.Error {
	param := fmt.Sprintf("messages[%d].role", i)
	return openai.BadRequest(param, fmt.Sprintf("%s: expected \"user\" or \"assistant\", got %q", param, role))
}

func hasInlineSystem(msgs []inlineMsg) bool {
	for i := range msgs {
		if msgs[i].Role == "system" {
			return true
		}
	}
	return false
}

// joinTexts joins the non-empty texts with "\n\n".
func joinTexts(texts ...string) string {
	var b strings.Builder
	for _, t := range texts {
		if t == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(t)
	}
	return b.String()
}

// inlineSystemText is a system message's text: a string content (empty when it is Claude
// Code's billing header), or its text blocks' texts joined without a separator, billing
// headers dropped. Blocks of other known types are ignored, as vLLM ignores them.
func inlineSystemText(m *wireMessage, i int) (string, *openai.Error) {
	param := fmt.Sprintf("messages[%d].content", i)
	s, blocks, aerr := decodeContent(m.Content, param)
	if aerr != nil {
		return "", aerr
	}
	if blocks == nil {
		if isBillingHeader(s) {
			return "", nil
		}
		return s, nil
	}
	var b strings.Builder
	for j := range blocks {
		bk := &blocks[j]
		switch bk.Type {
		case "text":
			if bk.Text != nil && !isBillingHeader(*bk.Text) {
				b.WriteString(*bk.Text)
			}
		case "image", "tool_use", "tool_result", "thinking", "redacted_thinking":
		case "":
			bp := fmt.Sprintf("%s[%d].type", param, j)
			return "", openai.BadRequest(bp, bp+": Field required")
		default:
			bp := fmt.Sprintf("%s[%d]", param, j)
			return "", openai.BadRequest(bp+".type", fmt.Sprintf("%s.type: content blocks of type %q are not supported", bp, bk.Type))
		}
	}
	return b.String(), nil
}

// decodeContent decodes a message content: a string (blocks nil) or an array of blocks (never
// nil then).
func decodeContent(raw json.RawMessage, param string) (string, []wireBlock, *openai.Error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, openai.BadRequest(param, param+": Field required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", nil, openai.BadRequest(param, param+": invalid string")
		}
		return s, nil, nil
	}
	blocks := []wireBlock{}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", nil, openai.BadRequest(param, param+": expected a string or an array of content blocks")
	}
	return "", blocks, nil
}

// moveOutOfToolRuns moves each system message between an assistant message with tool_use
// blocks and the message after it past the next user message (or before the next assistant).
func moveOutOfToolRuns(msgs []inlineMsg) []inlineMsg {
	out := make([]inlineMsg, 0, len(msgs))
	var held []inlineMsg
	awaiting := false
	for _, m := range msgs {
		if m.Role == "system" {
			if awaiting {
				held = append(held, m)
			} else {
				out = append(out, m)
			}
			continue
		}
		if m.Role == "assistant" {
			out = append(out, held...)
			held = held[:0]
		}
		out = append(out, m)
		if m.Role == "user" {
			out = append(out, held...)
			held = held[:0]
		}
		awaiting = m.Role == "assistant" && hasToolUse(m.Content)
	}
	return append(out, held...)
}

// hasToolUse reports whether a content is an array holding a tool_use block.
func hasToolUse(raw json.RawMessage) bool {
	if len(raw) == 0 || raw[0] != '[' {
		return false
	}
	var blocks []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return false
	}
	for _, b := range blocks {
		if b.Type == "tool_use" {
			return true
		}
	}
	return false
}

// foldInline folds every system message of msgs into a neighbour.
func foldInline(msgs []inlineMsg) ([]inlineMsg, *openai.Error) {
	out := make([]inlineMsg, 0, len(msgs))
	var pending []string
	pendingAt := 0
	for _, m := range msgs {
		if m.Role == "system" {
			t, aerr := inlineSystemText(&m.wireMessage, m.at)
			if aerr != nil {
				return nil, aerr
			}
			switch {
			case t == "":
			case len(out) > 0 && out[len(out)-1].Role == "user" && len(pending) == 0:
				last := &out[len(out)-1]
				if last.Content, aerr = appendToUser(last.Content, t, last.at); aerr != nil {
					return nil, aerr
				}
			default:
				if len(pending) == 0 {
					pendingAt = m.at
				}
				pending = append(pending, t)
			}
			continue
		}
		if len(pending) > 0 {
			t := joinTexts(pending...)
			pending = pending[:0]
			if m.Role == "user" {
				var aerr *openai.Error
				if m.Content, aerr = prependToUser(m.Content, t, m.at); aerr != nil {
					return nil, aerr
				}
			} else {
				out = append(out, textMessage("user", t, pendingAt))
			}
		}
		out = append(out, m)
	}
	if len(pending) > 0 {
		out = append(out, textMessage("user", joinTexts(pending...), pendingAt))
	}
	return out, nil
}

func textMessage(role, text string, at int) inlineMsg {
	return inlineMsg{wireMessage{Role: role, Content: mustJSON(text)}, at}
}

// mustJSON encodes a value that always encodes (strings, slices of raw JSON).
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("anthropic: encoding %T: %v", v, err)) // unreachable: v always encodes
	}
	return b
}

// appendToUser joins text to the end of a user message: to its own text, or, when it holds
// only tool_result blocks, to the last one's content.
func appendToUser(raw json.RawMessage, text string, at int) (json.RawMessage, *openai.Error) {
	param := fmt.Sprintf("messages[%d].content", at)
	s, blocks, aerr := decodeContent(raw, param)
	if aerr != nil {
		return nil, aerr
	}
	if blocks == nil {
		return mustJSON(joinTexts(s, text)), nil
	}
	items := rawBlocks(raw)
	onlyResults := len(blocks) > 0
	for i := range blocks {
		onlyResults = onlyResults && blocks[i].Type == "tool_result"
	}
	if onlyResults {
		last, aerr := appendToResult(items[len(items)-1], &blocks[len(blocks)-1], text, param)
		if aerr != nil {
			return nil, aerr
		}
		items[len(items)-1] = last
		return mustJSON(items), nil
	}
	var results, own []json.RawMessage
	var ownBlocks []wireBlock
	for i := range blocks {
		if blocks[i].Type == "tool_result" {
			results = append(results, items[i])
		} else {
			own = append(own, items[i])
			ownBlocks = append(ownBlocks, blocks[i])
		}
	}
	own = addText(own, ownBlocks, text, true)
	return mustJSON(append(results, own...)), nil
}

// prependToUser joins text to the start of a user message.
func prependToUser(raw json.RawMessage, text string, at int) (json.RawMessage, *openai.Error) {
	s, blocks, aerr := decodeContent(raw, fmt.Sprintf("messages[%d].content", at))
	if aerr != nil {
		return nil, aerr
	}
	if blocks == nil {
		return mustJSON(joinTexts(text, s)), nil
	}
	return mustJSON(addText(rawBlocks(raw), blocks, text, false)), nil
}

// rawBlocks splits an array content that decoded into blocks into its raw blocks.
func rawBlocks(raw json.RawMessage) []json.RawMessage {
	var items []json.RawMessage
	_ = json.Unmarshal(raw, &items) // it decoded as an array of blocks already
	return items
}

// addText joins text onto the text block at one end of items (blocks their decoded form), or
// adds a text block there when that end is not a text block.
func addText(items []json.RawMessage, blocks []wireBlock, text string, atEnd bool) []json.RawMessage {
	end := 0
	if atEnd {
		end = len(items) - 1
	}
	if len(items) > 0 && blocks[end].Type == "text" {
		old := ""
		if blocks[end].Text != nil {
			old = *blocks[end].Text
		}
		joined := joinTexts(text, old)
		if atEnd {
			joined = joinTexts(old, text)
		}
		items[end] = withMember(items[end], "text", mustJSON(joined))
		return items
	}
	tb := textBlock(text)
	if atEnd {
		return append(items, tb)
	}
	return append([]json.RawMessage{tb}, items...)
}

func textBlock(text string) json.RawMessage {
	return mustJSON(map[string]json.RawMessage{"type": json.RawMessage(`"text"`), "text": mustJSON(text)})
}

// withMember returns the object raw with member k set to v.
func withMember(raw json.RawMessage, k string, v json.RawMessage) json.RawMessage {
	var obj map[string]json.RawMessage
	_ = json.Unmarshal(raw, &obj) // raw decoded as a block already
	obj[k] = v
	return mustJSON(obj)
}

// appendToResult joins text to the end of a tool_result block's content: a string (or none)
// joins as text; an array gets it on its last text item or as a new text item.
func appendToResult(raw json.RawMessage, b *wireBlock, text, param string) (json.RawMessage, *openai.Error) {
	c := b.Content
	if len(c) == 0 || string(c) == "null" || c[0] == '"' {
		s := ""
		if len(c) > 0 && c[0] == '"' {
			if err := json.Unmarshal(c, &s); err != nil {
				return nil, openai.BadRequest(param, param+": invalid string")
			}
		}
		return withMember(raw, "content", mustJSON(joinTexts(s, text))), nil
	}
	var items []json.RawMessage
	var blocks []wireBlock
	if json.Unmarshal(c, &items) != nil || json.Unmarshal(c, &blocks) != nil {
		return nil, openai.BadRequest(param, param+": a tool_result's content must be a string or an array of text and image blocks")
	}
	return withMember(raw, "content", mustJSON(addText(items, blocks, text, true))), nil
}
