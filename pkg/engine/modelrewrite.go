package engine

import (
	"bytes"

	"github.com/kvgate/kvgate/pkg/openai"
)

// modelRewriter gives an OpenAI client back the model name it asked for when an http:// worker
// answers with its own (DESIGN.md §6: the gateway is a drop-in replacement; the engine may know
// the model by another name). It edits bytes instead of re-marshaling each object.
//
// It replaces the value of the first key "model" of a JSON text whose value is exactly the
// engine's name (JSON-encoded without HTML escaping, as Python servers write it), with the
// requested name. A match counts only when the key's opening quote follows '{' or ','
// (whitespace aside): a quote there is a real quote, not one inside a string (those are
// preceded by a backslash), and it cannot close a string, because the bare "model" after it
// would make the text invalid JSON. The value then starts at an unescaped quote and the
// engine's complete encoding ends at its closing quote, so the replaced bytes are exactly that
// string token. OpenAI completion objects carry "model" at the top level before "choices" and
// nowhere else, so the first such key is the one to change. A name encoded differently (say
// with \u escapes) does not match and passes through unchanged.
type modelRewriter struct {
	from []byte // the engine's name as a JSON string, quotes included
	to   []byte // the requested name as a JSON string, quotes included
}

// maxRewriteLine bounds the SSE line (and maxRewriteBody the JSON body) held back for
// rewriting; longer ones pass through unchanged rather than growing a buffer without limit.
const (
	maxRewriteLine = 1 << 20
	maxRewriteBody = 64 << 20
)

// newModelRewriter returns a rewriter from the engine's name to the requested one, or nil when
// they are equal (or either is empty) and responses pass through untouched.
func newModelRewriter(engine, requested string) *modelRewriter {
	if engine == requested || engine == "" || requested == "" {
		return nil
	}
	return &modelRewriter{from: openai.AppendString(nil, engine), to: openai.AppendString(nil, requested)}
}

var modelKey = []byte(`"model"`)

// appendRewritten appends src to dst with the model value replaced (see modelRewriter).
func (r *modelRewriter) appendRewritten(dst, src []byte) []byte {
	off := 0
	for {
		i := bytes.Index(src[off:], modelKey)
		if i < 0 {
			return append(dst, src...)
		}
		k := off + i
		off = k + len(modelKey)
		if !structuralBefore(src[:k]) {
			continue
		}
		v := skipSpace(src, off)
		if v >= len(src) || src[v] != ':' {
			continue
		}
		v = skipSpace(src, v+1)
		if !bytes.HasPrefix(src[v:], r.from) {
			continue
		}
		dst = append(dst, src[:v]...)
		dst = append(dst, r.to...)
		return append(dst, src[v+len(r.from):]...)
	}
}

// appendLine appends one SSE line, rewriting it when it is a data line.
func (r *modelRewriter) appendLine(dst, line []byte) []byte {
	if !bytes.HasPrefix(line, []byte("data:")) {
		return append(dst, line...)
	}
	return r.appendRewritten(dst, line)
}

// structuralBefore reports whether the last non-whitespace byte of b is '{' or ','.
func structuralBefore(b []byte) bool {
	for i := len(b) - 1; i >= 0; i-- {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			continue
		case '{', ',':
			return true
		}
		return false
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// sseRewriter rewrites an SSE stream line by line as it arrives in arbitrary chunks; a line
// is held until its newline (or until it exceeds maxRewriteLine, then it passes unchanged).
type sseRewriter struct {
	r    *modelRewriter
	pend []byte // the current line so far
	out  []byte
	long bool // the current line outgrew maxRewriteLine: pass it through to its newline
}

// feed returns the bytes to write for chunk: every line completed by it, rewritten. The
// result is valid until the next call.
func (s *sseRewriter) feed(chunk []byte) []byte {
	s.out = s.out[:0]
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if s.long {
			if i < 0 {
				return append(s.out, chunk...)
			}
			s.out = append(s.out, chunk[:i+1]...)
			s.long = false
			chunk = chunk[i+1:]
			continue
		}
		if i < 0 {
			s.pend = append(s.pend, chunk...)
			if len(s.pend) > maxRewriteLine {
				s.out = append(s.out, s.pend...)
				s.pend = s.pend[:0]
				s.long = true
			}
			break
		}
		line := chunk[:i+1]
		if len(s.pend) > 0 {
			s.pend = append(s.pend, line...)
			line = s.pend
		}
		s.out = s.r.appendLine(s.out, line)
		s.pend = s.pend[:0]
		chunk = chunk[i+1:]
	}
	return s.out
}

// rest returns the held partial line, rewritten, and empties it.
func (s *sseRewriter) rest() []byte {
	s.out = s.r.appendLine(s.out[:0], s.pend)
	s.pend = s.pend[:0]
	return s.out
}
