package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// The audio endpoints a gateway forwards, POST /v1/audio/transcriptions and
// /v1/audio/translations (multipart uploads, vLLM's shapes): they answer at once and
// deterministically, {"text": "<n> bytes of <name> (<task>)"} and the same words as
// transcription.chunk events when stream is true, so tests see that the upload arrived whole.

// handleAudio serves both audio endpoints.
func (s *Server) handleAudio(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	if err := r.ParseMultipartForm(s.cfg.MaxBodyBytes); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, &apiError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body larger than %d bytes", s.cfg.MaxBodyBytes)})
			return
		}
		writeError(w, badRequest("the body must be multipart/form-data: %v", err))
		return
	}
	defer r.MultipartForm.RemoveAll()
	if aerr := s.checkModel(r.FormValue("model")); aerr != nil {
		writeError(w, aerr)
		return
	}
	f, fh, err := r.FormFile("file")
	if err != nil {
		writeError(w, &apiError{status: http.StatusBadRequest, msg: "file is required", param: "file"})
		return
	}
	n, _ := io.Copy(io.Discard, f)
	f.Close()
	task := strings.TrimPrefix(r.URL.Path, "/v1/audio/")
	text := fmt.Sprintf("%d bytes of %s (%s)", n, fh.Filename, task)
	if r.FormValue("stream") != "true" {
		writeJSON(w, map[string]any{"text": text})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	id := fmt.Sprintf("trsc-%x", s.nextID.Add(1))
	for i, word := range strings.SplitAfter(text, " ") {
		chunk, _ := json.Marshal(map[string]any{"id": id, "object": "transcription.chunk", "created": s.created, "model": s.cfg.Model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": word}, "finish_reason": nil}}, "seq": i})
		fmt.Fprintf(w, "data: %s\n\n", chunk)
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}
