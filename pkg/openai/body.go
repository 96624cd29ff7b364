package openai

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// bodyPool recycles request-body buffers; buffers that grew past maxPooledBody are dropped.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBody = 1 << 20

// ReadBody reads at most limit bytes of r's body; a larger body is a 413. The body is valid
// until release is called (release is never nil): parsed requests refer into it.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, release func(), err *Error) {
	release = func() {}
	tooLarge := &Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body larger than %d bytes", limit), Type: TypeInvalidRequest, Code: "request_too_large"}
	if r.ContentLength > limit {
		return nil, release, tooLarge
	}
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead + 1) // ReadFrom wants MinRead spare bytes
	}
	release = func() {
		if buf.Cap() <= maxPooledBody {
			bodyPool.Put(buf)
		}
	}
	if _, rerr := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); rerr != nil {
		var mbe *http.MaxBytesError
		if errors.As(rerr, &mbe) {
			return nil, release, tooLarge
		}
		return nil, release, BadRequest("", "could not read request body")
	}
	return buf.Bytes(), release, nil
}
