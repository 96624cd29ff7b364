package router

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/pkg/endpoint"
)

// audioWorker answers the audio endpoints with what it got: the model field, the file's bytes
// and name, the other fields; as two SSE chunks when stream=true.
func audioWorker(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"whisper-engine","object":"model"}]}`)
	})
	for _, p := range endpoint.AudioPaths {
		mux.HandleFunc("POST "+p, func(w http.ResponseWriter, r *http.Request) {
			if err := r.ParseMultipartForm(1 << 20); err != nil {
				http.Error(w, `{"error":{"message":"bad form"}}`, http.StatusBadRequest)
				return
			}
			f, fh, err := r.FormFile("file")
			if err != nil {
				http.Error(w, `{"error":{"message":"no file"}}`, http.StatusBadRequest)
				return
			}
			b, _ := io.ReadAll(f)
			got := fmt.Sprintf("%s model=%s file=%s:%x language=%s", r.URL.Path, r.FormValue("model"), fh.Filename, b, r.FormValue("language"))
			if r.FormValue("stream") == "true" {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", got)
				fmt.Fprint(w, "data: [DONE]\n\n")
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"text":%q}`, got)
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// audioForm is a multipart upload with a binary file and fields.
func audioForm(t *testing.T, fields map[string]string) (string, *bytes.Buffer) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	fw, _ := w.CreateFormFile("file", "clip.wav")
	fw.Write([]byte{0, 1, 2, 0xff, '\r', '\n', '-', '-'})
	for k, v := range fields {
		w.WriteField(k, v)
	}
	w.Close()
	return w.FormDataContentType(), &b
}

// TestAudioForwarded: the upload reaches an HTTP worker byte for byte with only the model
// field renamed; a streamed answer is relayed as events; bad uploads are 400 or 413.
func TestAudioForwarded(t *testing.T) {
	srv := audioWorker(t)
	g := newTestGateway(t, testConfig{MaxBodyBytes: 4096}, srv.URL)
	post := func(path, ct string, body io.Reader) (*http.Response, string) {
		resp, err := g.srv.Client().Post(g.srv.URL+path, ct, body)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, p := range endpoint.AudioPaths {
		ct, body := audioForm(t, map[string]string{"model": "test-model", "language": "fr"})
		resp, out := post(p, ct, body)
		want := fmt.Sprintf(`{"text":"%s model=whisper-engine file=clip.wav:000102ff0d0a2d2d language=fr"}`, p)
		if resp.StatusCode != 200 || out != want {
			t.Errorf("%s: %d %s, want %s", p, resp.StatusCode, out, want)
		}
	}
	ct, body := audioForm(t, map[string]string{"model": "test-model", "stream": "true"})
	resp, out := post("/v1/audio/transcriptions", ct, body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || !strings.Contains(out, "model=whisper-engine") || !strings.HasSuffix(out, "data: [DONE]\n\n") {
		t.Errorf("stream: %d %q", resp.StatusCode, out)
	}
	ct, body = audioForm(t, map[string]string{"language": "en"}) // no model: the default, named to the worker
	if resp, out := post("/v1/audio/translations", ct, body); resp.StatusCode != 200 || !strings.Contains(out, "model=whisper-engine") {
		t.Errorf("without a model: %d %s", resp.StatusCode, out)
	}
	if resp, out := post("/v1/audio/transcriptions", "application/json", strings.NewReader(`{}`)); resp.StatusCode != 400 || !strings.Contains(openAIError(t, out).Message, "multipart/form-data") {
		t.Errorf("JSON body: %d %s", resp.StatusCode, out)
	}
	if resp, out := post("/v1/audio/transcriptions", "multipart/form-data; boundary=x", strings.NewReader("--x\r\nbroken")); resp.StatusCode != 400 {
		t.Errorf("broken form: %d %s", resp.StatusCode, out)
	}
	ct, body = audioForm(t, map[string]string{"model": "test-model", "pad": strings.Repeat("x", 5000)})
	if resp, out := post("/v1/audio/transcriptions", ct, body); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized upload: %d %s, want 413", resp.StatusCode, out)
	}
}
