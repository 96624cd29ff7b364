// Package pyfloat writes a float64 as Python writes it: repr(float), which is also what
// json.dumps writes for a finite float.
//
// Both halves of chat need it: the renderer's tojson filter (pkg/chat, json.dumps of template
// values) and the output parsers' re-formatting of tool-call arguments (pkg/chat/parse,
// json.dumps(json.loads(...)) as vLLM's non-streaming path sends them). The parsers must not
// import the renderer, and the renderer has no use for the parsers, so the one formatter is a
// leaf package both import, internal to pkg/chat. Append is its only call.
package pyfloat
