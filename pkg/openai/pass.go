package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/textproto"
)

// PassRequest is a request the gateway forwards to an HTTP worker as the client sent it, with
// only its model renamed: vLLM's pooling endpoints (embeddings, pooling, classify, score,
// rerank; a JSON body, ParsePass) and its audio endpoints (a multipart upload, ParseForm),
// whose answers gain nothing from the prefix cache and whose bodies the gateway need not
// understand. Only model and stream are read. The request refers into the body it was parsed
// from.
type PassRequest struct {
	// Path is the endpoint's path, the same on the worker.
	Path   string
	Model  string
	Stream bool
	raw    map[string]json.RawMessage
	n      int
	// boundary is a multipart body's boundary (ParseForm; "" for JSON), form its parts.
	form     []formPart
	boundary string
}

// formPart is one part of a multipart body.
type formPart struct {
	header textproto.MIMEHeader
	name   string
	body   []byte
}

// MaxFormParts bounds the parts of a multipart body.
const MaxFormParts = 256

// ParseForm reads a multipart/form-data body for path (the audio endpoints' uploads): the
// model and stream fields are read, every part is forwarded as sent. Failures are 400
// *Errors.
func ParseForm(body []byte, contentType, path string) (*PassRequest, *Error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, BadRequest("", "the body must be multipart/form-data with a boundary")
	}
	r := &PassRequest{Path: path, n: len(body), boundary: params["boundary"]}
	mr := multipart.NewReader(bytes.NewReader(body), r.boundary)
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, BadRequest("", "malformed multipart body: "+err.Error())
		}
		if len(r.form) == MaxFormParts {
			return nil, BadRequest("", fmt.Sprintf("more than %d parts", MaxFormParts))
		}
		b, err := io.ReadAll(p)
		if err != nil {
			return nil, BadRequest("", "malformed multipart body: "+err.Error())
		}
		fp := formPart{header: p.Header, name: p.FormName(), body: b}
		switch fp.name {
		case "model":
			r.Model = string(b)
		case "stream":
			r.Stream = string(b) == "true"
		}
		r.form = append(r.form, fp)
	}
	return r, nil
}

// ContentType is the upstream body's content type.
func (r *PassRequest) ContentType() string {
	if r.boundary != "" {
		return "multipart/form-data; boundary=" + r.boundary
	}
	return "application/json"
}

// appendForm appends the multipart body with the model field set to model (added when absent).
func (r *PassRequest) appendForm(dst []byte, model string) []byte {
	buf := bytes.NewBuffer(dst)
	w := multipart.NewWriter(buf)
	_ = w.SetBoundary(r.boundary)
	seen := false
	for _, p := range r.form {
		body := p.body
		if p.name == "model" {
			body, seen = []byte(model), true
		}
		pw, _ := w.CreatePart(p.header)
		_, _ = pw.Write(body)
	}
	if !seen && model != "" {
		_ = w.WriteField("model", model)
	}
	_ = w.Close()
	return buf.Bytes()
}

// ParsePass reads a JSON object body for path: model, when present, must be a string; the rest
// is forwarded unread (the engine validates it). Failures are 400 *Errors.
func ParsePass(body []byte, path string, lim Limits) (*PassRequest, *Error) {
	maxDepth := lim.MaxJSONDepth
	if maxDepth <= 0 {
		maxDepth = DefaultMaxJSONDepth
	}
	if d := jsonDepth(body); d > maxDepth {
		return nil, BadRequest("", fmt.Sprintf("request body nests %d levels deep, more than the %d allowed", d, maxDepth))
	}
	raw, err := scanBody(body)
	if err != nil {
		return nil, err
	}
	r := &PassRequest{Path: path, raw: raw, n: len(body)}
	if r.Model, err = parseModel(raw); err != nil {
		return nil, err
	}
	r.Stream = isTrue(raw["stream"])
	return r, nil
}

// AppendUpstream appends the body for an http:// worker: every member as sent, model set to
// the worker's name.
func (r *PassRequest) AppendUpstream(dst []byte, model string) []byte {
	if r.boundary != "" {
		return r.appendForm(dst, model)
	}
	return appendFields(dst, r.raw, model, nil, func(dst []byte, _ string) ([]byte, bool) { return dst, false })
}

// BodyLen returns the size of the client's body.
func (r *PassRequest) BodyLen() int { return r.n }
