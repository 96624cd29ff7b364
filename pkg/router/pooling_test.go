package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/endpoint"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// poolingWorker is an HTTP worker serving the pooling endpoints: each answers its path and the
// body it got, as {"model":…,"path":…,"got":…}, and publishes the body on reqs.
func poolingWorker(t *testing.T, model string) (*httptest.Server, chan map[string]any) {
	t.Helper()
	reqs := make(chan map[string]any, 16)
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, model)
	})
	for _, p := range endpoint.PoolingPaths {
		mux.HandleFunc("POST "+p, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			var body map[string]any
			if json.Unmarshal(b, &body) != nil {
				http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
				return
			}
			body["_path"] = r.URL.Path
			reqs <- body
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"model":%q,"object":"list","data":[{"index":0,"embedding":[0.5,-0.5]}],"path":%q}`, model, r.URL.Path)
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, reqs
}

// TestPoolingForwarded: each pooling endpoint's body reaches an HTTP worker at the same path
// with only its model renamed, and the answer comes back with the client's model name; gRPC
// workers of the model are never chosen.
func TestPoolingForwarded(t *testing.T) {
	srv, reqs := poolingWorker(t, "engine-name")
	f := newFakeVLLM()
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}, Policy: mustPolicy(t, "round_robin")}, srv.URL, "url=grpc://"+addr+",runtime=vllm")
	g.waitFor(t, "both workers healthy", func() bool {
		ms := g.members()
		return len(ms) == 2 && ms[0].Worker().Healthy() && ms[1].Worker().Healthy()
	})
	for _, p := range endpoint.PoolingPaths {
		for try := range 3 { // a policy that ignored the worker kind would pick the gRPC one
			body := `{"model":"test-model","input":["a b c","d"],"encoding_format":"float","extra":{"k":[1,2]}}`
			resp, out := g.do(t, http.MethodPost, p, body, "")
			if resp.StatusCode != http.StatusOK || resp.Header.Get(pipeline.HeaderWorker) != srv.URL {
				t.Fatalf("%s (try %d): %d from %s: %s", p, try, resp.StatusCode, resp.Header.Get(pipeline.HeaderWorker), out)
			}
			if !strings.Contains(out, `"model":"test-model"`) || !strings.Contains(out, `"path":"`+p+`"`) {
				t.Errorf("%s: answer %s, want the worker's with the client's model name", p, out)
			}
			got := <-reqs
			if got["_path"] != p || got["model"] != "engine-name" || got["encoding_format"] != "float" || fmt.Sprint(got["extra"]) != "map[k:[1 2]]" || fmt.Sprint(got["input"]) != "[a b c d]" {
				t.Errorf("%s: worker got %v, want the client's body at the same path, model renamed", p, got)
			}
		}
	}
	select {
	case r := <-f.reqs:
		t.Errorf("a pooling request reached the gRPC worker: %v", r)
	default:
	}
}

// TestPoolingErrors: bad bodies, unknown models and a model served only by gRPC workers.
func TestPoolingErrors(t *testing.T) {
	f := newFakeVLLM()
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}}, "url=grpc://"+addr+",runtime=vllm")
	for _, tt := range []struct {
		path, body string
		status     int
		contains   string
	}{
		{"/v1/embeddings", `{"input":"x"`, 400, "invalid JSON"},
		{"/v1/embeddings", `["x"]`, 400, "JSON object"},
		{"/v1/embeddings", `{"model":5,"input":"x"}`, 400, "model must be a string"},
		{"/v1/rerank", `{"model":"nope","query":"q","documents":["d"]}`, 404, "nope"},
		{"/v1/embeddings", `{"model":"test-model","input":"x"}`, 400, "POST /v1/embeddings is served by http:// workers only"},
		{"/score", `{"text_1":"a","text_2":"b"}`, 400, "POST /score is served by http:// workers only"},
	} {
		resp, out := g.do(t, http.MethodPost, tt.path, tt.body, "")
		if resp.StatusCode != tt.status || !strings.Contains(openAIError(t, out).Message, tt.contains) {
			t.Errorf("%s %s: got %d %s, want %d containing %q", tt.path, tt.body, resp.StatusCode, out, tt.status, tt.contains)
		}
	}
	resp, _ := g.do(t, http.MethodGet, "/v1/embeddings", "", "")
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/embeddings: %d, want 405", resp.StatusCode)
	}
}
