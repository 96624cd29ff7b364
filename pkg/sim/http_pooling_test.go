package sim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func poolingServer(t *testing.T) (*Server, TextCodec) {
	t.Helper()
	tok := loadQwen3(t)
	e, err := NewEngine(EngineConfig{Core: Config{VocabSize: tok.VocabSize(), MaxModelLen: 64, NumBlocks: 8, BlockSize: 16}}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	codec := NewTokenizerCodec(tok)
	s, err := NewServer(ServerConfig{Model: "m", Codec: codec}, Ranks{e}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, codec
}

func postTo(s *Server, path, body string) (int, []byte) {
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return rec.Code, rec.Body.Bytes()
}

// TestEmbeddings: vLLM's embedding list, one unit vector per input, the same for the same ids
// whether given as text or ids, as floats or base64 float32s.
func TestEmbeddings(t *testing.T) {
	s, codec := poolingServer(t)
	ids, _ := codec.Encode("hello world")
	code, body := postTo(s, "/v1/embeddings", `{"model":"m","input":["hello world","other"],"dimensions":8}`)
	var resp struct {
		Object string
		Model  string
		Data   []struct {
			Index     int
			Object    string
			Embedding json.RawMessage
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		}
	}
	if err := json.Unmarshal(body, &resp); err != nil || code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	other, _ := codec.Encode("other")
	if resp.Object != "list" || resp.Model != "m" || len(resp.Data) != 2 || resp.Data[1].Index != 1 || resp.Data[0].Object != "embedding" ||
		resp.Usage.PromptTokens != len(ids)+len(other) || resp.Usage.TotalTokens != resp.Usage.PromptTokens {
		t.Fatalf("response %s", body)
	}
	var v []float32
	if err := json.Unmarshal(resp.Data[0].Embedding, &v); err != nil {
		t.Fatal(err)
	}
	if want := Embedding(ids, 8); !cmp.Equal(v, want) {
		t.Errorf("embedding %v, want %v", v, want)
	}
	var norm float64
	for _, f := range v {
		norm += float64(f) * float64(f)
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Errorf("norm %v, want 1", norm)
	}
	_, body = postTo(s, "/v1/embeddings", `{"input":`+idsJSON(ids)+`,"encoding_format":"base64"}`)
	var b64 struct{ Data []struct{ Embedding string } }
	if err := json.Unmarshal(body, &b64); err != nil || len(b64.Data) != 1 {
		t.Fatalf("base64: %s", body)
	}
	raw, err := base64.StdEncoding.DecodeString(b64.Data[0].Embedding)
	if err != nil || len(raw) != 4*embeddingDims {
		t.Fatalf("base64 embedding %q: %v", b64.Data[0].Embedding, err)
	}
	want := Embedding(ids, embeddingDims)
	for i := range want {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != want[i] {
			t.Fatalf("base64 value %d: %v, want %v", i, got, want[i])
		}
	}
	for _, bad := range []string{`{"model":"x","input":"a"}`, `{"input":[]}`, `{"input":5}`, `{"input":"a","dimensions":0}`, `{"input":"a","encoding_format":"hex"}`, `{`} {
		if code, body := postTo(s, "/v1/embeddings", bad); code/100 != 4 {
			t.Errorf("%s: %d %s, want a 4xx", bad, code, body)
		}
	}
}

// TestRerank: results sorted by score (the query's tokens the document holds), top_n, the
// documents returned.
func TestRerank(t *testing.T) {
	s, _ := poolingServer(t)
	for _, path := range []string{"/rerank", "/v1/rerank", "/v2/rerank"} {
		code, body := postTo(s, path, `{"model":"m","query":"capital of France","documents":["Berlin is in Germany","capital of France: Paris","Germany and France"],"top_n":2}`)
		var resp struct {
			Model   string
			Results []struct {
				Index          int
				RelevanceScore float64 `json:"relevance_score"`
				Document       struct{ Text string }
			}
			Usage struct {
				TotalTokens int `json:"total_tokens"`
			}
		}
		if err := json.Unmarshal(body, &resp); err != nil || code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		if len(resp.Results) != 2 || resp.Results[0].Index != 1 || resp.Results[0].RelevanceScore != 1 || resp.Results[1].Index != 2 ||
			resp.Results[1].RelevanceScore <= 0 || resp.Results[1].RelevanceScore >= 1 || resp.Results[0].Document.Text != "capital of France: Paris" || resp.Usage.TotalTokens <= 0 {
			t.Errorf("%s: %s", path, body)
		}
	}
	if code, _ := postTo(s, "/rerank", `{"documents":["a"]}`); code != 400 {
		t.Errorf("no query: %d", code)
	}
}

// TestAudio: an upload is answered with its size and name, streamed as chunks on request.
func TestAudio(t *testing.T) {
	s, _ := poolingServer(t)
	form := func(fields ...string) (string, *strings.Builder) {
		var b strings.Builder
		w := multipart.NewWriter(&b)
		fw, _ := w.CreateFormFile("file", "a.wav")
		fw.Write(make([]byte, 1000))
		for i := 0; i+1 < len(fields); i += 2 {
			w.WriteField(fields[i], fields[i+1])
		}
		w.Close()
		return w.FormDataContentType(), &b
	}
	post := func(path, ct, body string) (int, string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", ct)
		s.Handler().ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	ct, b := form("model", "m")
	if code, out := post("/v1/audio/transcriptions", ct, b.String()); code != 200 || out != `{"text":"1000 bytes of a.wav (transcriptions)"}`+"\n" {
		t.Errorf("%d %s", code, out)
	}
	ct, b = form("stream", "true")
	code, out := post("/v1/audio/translations", ct, b.String())
	var text strings.Builder
	for _, line := range strings.Split(out, "\n") {
		d, ok := strings.CutPrefix(line, "data: ")
		if !ok || d == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatal(err)
		}
		text.WriteString(c.Choices[0].Delta.Content)
	}
	if code != 200 || text.String() != "1000 bytes of a.wav (translations)" || !strings.HasSuffix(out, "data: [DONE]\n\n") {
		t.Errorf("stream: %d %q", code, out)
	}
	ct, b = form("model", "other")
	if code, _ := post("/v1/audio/transcriptions", ct, b.String()); code != 404 {
		t.Errorf("other model: %d", code)
	}
	if code, _ := post("/v1/audio/transcriptions", "application/json", `{}`); code != 400 {
		t.Errorf("JSON: %d", code)
	}
}
