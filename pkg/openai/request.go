package openai

import (
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// What every request body shares (completions, chat): the limits it is checked against, the
// scan of its top-level fields, its model, and its re-encoding for http:// workers.

// Limits are the request checks that depend on configuration.
type Limits struct {
	// MaxN is the largest n accepted (0: no limit).
	MaxN int
	// MaxMessages bounds the messages of a chat request (0: DefaultMaxMessages).
	MaxMessages int
	// MaxJSONDepth bounds the nesting of a chat body (0: DefaultMaxJSONDepth).
	MaxJSONDepth int
}

// scanBody splits a request body into its top-level fields. JSON text is UTF-8 (RFC 8259 §8.1)
// and engines reject anything else (vLLM's json.loads fails on it); decoding would silently
// turn bad bytes into U+FFFD and route a prompt the engine never sees, so invalid UTF-8 is a
// 400.
func scanBody(body []byte) (map[string]json.RawMessage, *Error) {
	if !utf8.Valid(body) {
		return nil, BadRequest("", "request body is not valid UTF-8")
	}
	raw := make(map[string]json.RawMessage, 8)
	if err := scanObject(body, func(k string, v []byte) { raw[k] = v }); err != nil {
		// Let encoding/json describe what is wrong (the slow path only for bad bodies).
		var probe map[string]json.RawMessage
		if jerr := json.Unmarshal(body, &probe); jerr != nil {
			return nil, BadRequest("", "invalid JSON body: "+jsonErrText(jerr))
		}
		return nil, BadRequest("", "request body must be a JSON object")
	}
	return raw, nil
}

func parseModel(raw map[string]json.RawMessage) (string, *Error) {
	var m string
	if v, ok := raw["model"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &m); err != nil {
			return "", BadRequest("model", "model must be a string")
		}
	}
	return m, nil
}

// jsonErrText shortens encoding/json errors to something safe and useful for a client.
func jsonErrText(err error) string {
	switch e := err.(type) {
	case *json.SyntaxError:
		return fmt.Sprintf("syntax error at offset %d", e.Offset)
	case *json.UnmarshalTypeError:
		return "body must be a JSON object"
	}
	return "malformed"
}

// Edit changes one top-level field of a request body re-encoded for a worker: Value (valid
// JSON) replaces or adds the field, a nil Value removes it. The legs of a prefill/decode pair
// are the client's body with edits (wire/pd.md §§2.1, 2.4, 4.1).
type Edit struct {
	Key   string
	Value json.RawMessage
}

// Edits apply in order; a later edit of a key wins. nil: the body as sent.
type Edits []Edit

// Lookup returns the value the edits give key (nil for a removal) and whether they touch it.
func (e Edits) Lookup(key string) (json.RawMessage, bool) {
	for i := len(e) - 1; i >= 0; i-- {
		if e[i].Key == key {
			return e[i].Value, true
		}
	}
	return nil, false
}

// appendFields writes raw as a JSON object in sorted key order with "model" set to model (added
// when absent) and edits applied; replace may write another key's value itself (returning
// true).
func appendFields(dst []byte, raw map[string]json.RawMessage, model string, edits Edits, replace func(dst []byte, key string) ([]byte, bool)) []byte {
	keys := make([]string, 0, len(raw)+1+len(edits))
	for k := range raw {
		if v, ok := edits.Lookup(k); !ok || v != nil {
			keys = append(keys, k)
		}
	}
	if _, ok := raw["model"]; !ok {
		keys = append(keys, "model")
	}
	for i, e := range edits {
		if _, ok := raw[e.Key]; !ok && e.Value != nil && e.Key != "model" && !slices.ContainsFunc(edits[i+1:], func(o Edit) bool { return o.Key == e.Key }) {
			keys = append(keys, e.Key)
		}
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, k)
		dst = append(dst, ':')
		if k == "model" {
			dst = AppendString(dst, model)
			continue
		}
		if v, ok := edits.Lookup(k); ok {
			dst = append(dst, v...)
			continue
		}
		var done bool
		if dst, done = replace(dst, k); !done {
			dst = append(dst, raw[k]...)
		}
	}
	return append(dst, '}')
}
