package openai

import (
	"net/http"
)

// SetSSEHeaders sets the headers of a text/event-stream response: the content type (unless one
// is set already, e.g. copied from an engine), no caching, and no buffering by an nginx in
// front (X-Accel-Buffering), so every event reaches the client as it is written.
func SetSSEHeaders(h http.Header) {
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "text/event-stream")
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
}

// SSE writes a server-sent-event response and flushes after every write (STYLE.md rule 13).
// Headers go out with the first write (or Start). Once the stream has started, a failure is
// reported with Fail: one OpenAI error event, after which the caller ends the response. An SSE
// is used by one goroutine and must not be copied.
type SSE struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	// tail holds the last two bytes written, so Fail can close an event cut in the middle.
	tail [2]byte
	buf  []byte
}

// NewSSE returns a writer for w. Nothing is written yet.
func NewSSE(w http.ResponseWriter) *SSE {
	return &SSE{w: w, rc: http.NewResponseController(w)}
}

// Started reports whether the headers have been written.
func (s *SSE) Started() bool { return s.started }

// Start writes the SSE headers with status and flushes them. Later calls do nothing.
func (s *SSE) Start(status int) {
	if s.started {
		return
	}
	SetSSEHeaders(s.w.Header())
	s.w.WriteHeader(status)
	s.started = true
	_ = s.rc.Flush()
}

// Write sends p as is (bytes of an engine's own event stream, already framed) and flushes. An
// error means the client is gone.
func (s *SSE) Write(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	s.Start(http.StatusOK)
	if _, err := s.w.Write(p); err != nil {
		return err
	}
	if n := len(p); n >= 2 {
		s.tail = [2]byte{p[n-2], p[n-1]}
	} else {
		s.tail = [2]byte{s.tail[1], p[0]}
	}
	return s.rc.Flush()
}

// AppendEvent appends data framed as one event, "data: <data>\n\n" (data must not contain a
// newline: JSON encoders write none).
func AppendEvent(dst, data []byte) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}

// AppendDone appends the terminating "data: [DONE]" event of an OpenAI stream.
func AppendDone(dst []byte) []byte { return append(dst, "data: [DONE]\n\n"...) }

// Event sends data as one event.
func (s *SSE) Event(data []byte) error {
	s.buf = AppendEvent(s.buf[:0], data)
	return s.Write(s.buf)
}

// Done sends the terminating "data: [DONE]" event.
func (s *SSE) Done() error {
	s.buf = AppendDone(s.buf[:0])
	return s.Write(s.buf)
}

// Fail ends the stream with e as one error event in the OpenAI shape (DESIGN.md §7). When the
// bytes written so far stop inside an event, that event is closed first, so the error arrives
// as an event of its own. Write errors are ignored: the client may be gone.
func (s *SSE) Fail(e *Error) {
	s.buf = s.buf[:0]
	if s.started && s.tail != [2]byte{'\n', '\n'} && s.tail != [2]byte{} {
		s.buf = append(s.buf, "\n\n"...)
	}
	s.buf = AppendEvent(s.buf, e.AppendBody(nil))
	_ = s.Write(s.buf)
}
