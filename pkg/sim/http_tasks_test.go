package sim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/openai"
)

// tasksServer is poolingServer with the chat template, for the chat form of /pooling and
// /classify.
func tasksServer(t *testing.T) (*Server, TextCodec) {
	t.Helper()
	s, codec := poolingServer(t)
	s.cfg.Chat = qwen3Chat(t)
	return s, codec
}

// decodeOK decodes a 200 answer into v, failing the test on anything else.
func decodeOK(t *testing.T, code int, body []byte, v any) {
	t.Helper()
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
}

type poolingResp struct {
	ID      string
	Object  string
	Created int64
	Model   string
	Data    []struct {
		Index  int
		Object string
		Data   json.RawMessage
	}
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		TotalTokens      int `json:"total_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	}
}

// TestPooling: /pooling answers vLLM's list of "pooling" items for each task, the same data
// for text and its ids, per token for the token tasks, base64 as the flattened float32s; the
// chat form is rendered with the template and no generation prompt.
func TestPooling(t *testing.T) {
	s, codec := tasksServer(t)
	ids, _ := codec.Encode("hello world")
	other, _ := codec.Encode("other")
	var resp poolingResp
	code, body := postTo(s, "/pooling", `{"model":"m","input":["hello world","other"]}`)
	decodeOK(t, code, body, &resp)
	if !strings.HasPrefix(resp.ID, "pooling-") || resp.Object != "list" || resp.Model != "m" || resp.Created != s.created || len(resp.Data) != 2 ||
		resp.Data[1].Index != 1 || resp.Data[0].Object != "pooling" || resp.Usage.PromptTokens != len(ids)+len(other) || resp.Usage.TotalTokens != resp.Usage.PromptTokens {
		t.Fatalf("response %s", body)
	}
	var v []float32
	if err := json.Unmarshal(resp.Data[1].Data, &v); err != nil || !cmp.Equal(v, Embedding(other, embeddingDims)) {
		t.Errorf("embed data %s (%v), want %v", resp.Data[1].Data, err, Embedding(other, embeddingDims))
	}

	code, body = postTo(s, "/pooling", `{"input":`+idsJSON(ids)+`,"task":"classify","use_activation":false}`)
	resp = poolingResp{}
	decodeOK(t, code, body, &resp)
	if err := json.Unmarshal(resp.Data[0].Data, &v); err != nil || !cmp.Equal(v, ClassProbs(ids, false)) {
		t.Errorf("classify data %s, want %v", resp.Data[0].Data, ClassProbs(ids, false))
	}

	code, body = postTo(s, "/pooling", `{"input":"hello world","task":"token_embed"}`)
	resp = poolingResp{}
	decodeOK(t, code, body, &resp)
	var rows [][]float32
	if err := json.Unmarshal(resp.Data[0].Data, &rows); err != nil || len(rows) != len(ids) || !cmp.Equal(rows[1], Embedding(ids[1:2], embeddingDims)) {
		t.Errorf("token_embed data %s", resp.Data[0].Data)
	}

	code, body = postTo(s, "/pooling", `{"input":"hello world","task":"token_classify","encoding_format":"base64"}`)
	resp = poolingResp{}
	decodeOK(t, code, body, &resp)
	var b64 string
	_ = json.Unmarshal(resp.Data[0].Data, &b64)
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 4*numClasses*len(ids) {
		t.Fatalf("token_classify base64 %q: %v", b64, err)
	}
	if got, want := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*numClasses:])), ClassProbs(ids[1:2], true)[0]; got != want {
		t.Errorf("token_classify row 1: %v, want %v", got, want)
	}

	msgs := `[{"role":"user","content":"hello there"}]`
	req, oerr := openai.ParseChat([]byte(`{"messages":`+msgs+`,"add_generation_prompt":false}`), openai.Limits{})
	if oerr != nil {
		t.Fatal(oerr)
	}
	rendered, oerr := s.cfg.Chat.Render(req)
	if oerr != nil {
		t.Fatal(oerr)
	}
	code, body = postTo(s, "/pooling", `{"messages":`+msgs+`}`)
	resp = poolingResp{}
	decodeOK(t, code, body, &resp)
	if err := json.Unmarshal(resp.Data[0].Data, &v); err != nil || !cmp.Equal(v, Embedding(rendered.TokenIDs, embeddingDims)) || resp.Usage.PromptTokens != len(rendered.TokenIDs) {
		t.Errorf("chat form: %s, want the embedding of the %d rendered tokens", body, len(rendered.TokenIDs))
	}
}

// TestClassify: /classify answers the probabilities, the argmax label and the class count per
// input; use_activation false gives the raw logits.
func TestClassify(t *testing.T) {
	s, codec := tasksServer(t)
	texts := []string{"I loved it", "awful", "fine I guess"}
	in, _ := json.Marshal(texts)
	var resp struct {
		ID     string
		Object string
		Model  string
		Data   []struct {
			Index      int
			Label      string
			Probs      []float32
			NumClasses int `json:"num_classes"`
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		}
	}
	code, body := postTo(s, "/classify", `{"model":"m","input":`+string(in)+`}`)
	decodeOK(t, code, body, &resp)
	if !strings.HasPrefix(resp.ID, "classify-") || resp.Object != "list" || resp.Model != "m" || len(resp.Data) != len(texts) {
		t.Fatalf("response %s", body)
	}
	total := 0
	labels := map[string]bool{}
	for i, d := range resp.Data {
		ids, _ := codec.Encode(texts[i])
		total += len(ids)
		want := ClassProbs(ids, true)
		best := "LABEL_0"
		if want[1] > want[0] {
			best = "LABEL_1"
		}
		if d.Index != i || !cmp.Equal(d.Probs, want) || d.Label != best || d.NumClasses != numClasses {
			t.Errorf("item %d: %+v, want probs %v label %s", i, d, want, best)
		}
		if sum := d.Probs[0] + d.Probs[1]; math.Abs(float64(sum)-1) > 1e-5 {
			t.Errorf("item %d: probs sum to %v", i, sum)
		}
		labels[d.Label] = true
	}
	if resp.Usage.PromptTokens != total || resp.Usage.TotalTokens != total {
		t.Errorf("usage %+v, want %d", resp.Usage, total)
	}
	ids, _ := codec.Encode("awful")
	code, body = postTo(s, "/classify", `{"input":"awful","use_activation":false}`)
	decodeOK(t, code, body, &resp)
	if !cmp.Equal(resp.Data[0].Probs, ClassProbs(ids, false)) {
		t.Errorf("raw logits %v, want %v", resp.Data[0].Probs, ClassProbs(ids, false))
	}
	code, body = postTo(s, "/classify", `{"messages":[{"role":"user","content":"awful"}]}`)
	decodeOK(t, code, body, &resp)
	if len(resp.Data) != 1 || resp.Usage.PromptTokens <= len(ids) {
		t.Errorf("chat form: %s", body)
	}
}

// TestScore: every request form vLLM accepts, 1:N and N:N pairing, scores as rerank's.
func TestScore(t *testing.T) {
	s, codec := tasksServer(t)
	enc := func(x string) []uint32 { ids, _ := codec.Encode(x); return ids }
	q1, q2 := "capital of France", "largest planet"
	d1, d2 := "capital of France: Paris", "Jupiter is the largest planet"
	type scoreResp struct {
		ID      string
		Object  string
		Created int64
		Model   string
		Data    []struct {
			Index  int
			Object string
			Score  float64
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		}
	}
	cases := []struct {
		path, body string
		pairs      [][2]string
	}{
		{"/score", `{"model":"m","queries":"capital of France","documents":["capital of France: Paris","Jupiter is the largest planet"]}`, [][2]string{{q1, d1}, {q1, d2}}},
		{"/v1/score", `{"queries":["capital of France","largest planet"],"items":["Jupiter is the largest planet","capital of France: Paris"]}`, [][2]string{{q1, d2}, {q2, d1}}},
		{"/score", `{"data_1":["largest planet"],"data_2":"Jupiter is the largest planet"}`, [][2]string{{q2, d2}}},
		{"/v1/score", `{"text_1":"largest planet","text_2":["capital of France: Paris","Jupiter is the largest planet"]}`, [][2]string{{q2, d1}, {q2, d2}}},
	}
	for _, c := range cases {
		var resp scoreResp
		code, body := postTo(s, c.path, c.body)
		decodeOK(t, code, body, &resp)
		if !strings.HasPrefix(resp.ID, "score-") || resp.Object != "list" || resp.Model != "m" || resp.Created != s.created || len(resp.Data) != len(c.pairs) {
			t.Fatalf("%s: %s", c.body, body)
		}
		total := 0
		for i, p := range c.pairs {
			q, d := enc(p[0]), enc(p[1])
			total += len(q) + len(d)
			if got := resp.Data[i]; got.Index != i || got.Object != "score" || got.Score != RerankScore(q, d) {
				t.Errorf("%s: item %d %+v, want %v", c.body, i, got, RerankScore(q, d))
			}
		}
		if resp.Usage.PromptTokens != total || resp.Usage.TotalTokens != total {
			t.Errorf("%s: usage %+v, want %d", c.body, resp.Usage, total)
		}
	}
	var resp scoreResp
	decodeOK(t, 200, mustPost(t, s, "/score", `{"queries":"capital of France","documents":"capital of France: Paris"}`), &resp)
	if resp.Data[0].Score != 1 {
		t.Errorf("a document holding every query token scores %v, want 1", resp.Data[0].Score)
	}
}

func mustPost(t *testing.T, s *Server, path, body string) []byte {
	t.Helper()
	code, out := postTo(s, path, body)
	if code != 200 {
		t.Fatalf("%s %s: %d %s", path, body, code, out)
	}
	return out
}

// TestTasksBadInput: vLLM's 400 (404 for another model) in the OpenAI error shape, naming the
// parameter where vLLM names it.
func TestTasksBadInput(t *testing.T) {
	s, _ := tasksServer(t)
	// The test model's context is 64 tokens: long is over it, a pair of halves too.
	long, half := strings.Repeat("word ", 70), strings.Repeat("word ", 40)
	cases := []struct {
		path, body string
		code       int
		param      string
	}{
		{"/pooling", `{`, 400, ""},
		{"/pooling", `{"model":"x","input":"a"}`, 404, "model"},
		{"/pooling", `{}`, 400, "input"},
		{"/pooling", `{"input":[]}`, 400, ""},
		{"/pooling", `{"input":"a","task":"generate"}`, 400, "task"},
		{"/pooling", `{"input":"a","dimensions":4}`, 400, "dimensions"},
		{"/pooling", `{"input":"a","encoding_format":"bytes"}`, 400, "encoding_format"},
		{"/pooling", `{"input":"a","normalize":true}`, 400, "normalize"},
		{"/pooling", `{"messages":[{"content":"a"}]}`, 400, ""},
		{"/pooling", `{"messages":[{"role":"user","content":"a"}],"add_generation_prompt":true,"continue_final_message":true}`, 400, ""},
		{"/classify", `{"input":5}`, 400, ""},
		{"/classify", `{"input":"a","normalize":false}`, 400, "normalize"},
		{"/classify", `{"messages":"hi"}`, 400, ""},
		{"/score", `{"queries":"a"}`, 400, "queries"},
		{"/score", `{"queries":["a","b"],"documents":["a","b","c"]}`, 400, "queries"},
		{"/score", `{"text_1":"a","text_2":[]}`, 400, "text_1"},
		{"/v1/score", `{"data_1":{"content":[{"type":"image_url","image_url":{"url":"x"}}]},"data_2":"a"}`, 400, "data_1"},
		{"/v1/score", `{"queries":"a","documents":"b","normalize":true}`, 400, "normalize"},
		{"/v1/score", `{"model":"x","queries":"a","documents":"b"}`, 404, "model"},
		{"/pooling", `{"input":[1,2,999999999]}`, 400, "input"},
		{"/pooling", `{"input":"` + long + `"}`, 400, "input"},
		{"/v1/embeddings", `{"input":[[1],[2,999999999]]}`, 400, "input"},
		{"/classify", `{"input":""}`, 400, "input"},
		{"/classify", `{"messages":[{"role":"user","content":"` + long + `"}]}`, 400, "messages"},
		{"/score", `{"queries":"` + half + `","documents":["a","` + half + `"]}`, 400, "queries"},
	}
	for _, c := range cases {
		code, body := postTo(s, c.path, c.body)
		var e struct {
			Error struct {
				Message string
				Type    string
				Param   *string
				Code    int
			}
		}
		if err := json.Unmarshal(body, &e); err != nil || code != c.code || e.Error.Code != c.code || e.Error.Message == "" || e.Error.Type == "" {
			t.Errorf("%s %s: %d %s, want %d in the OpenAI error shape", c.path, c.body, code, body, c.code)
			continue
		}
		if c.param != "" && (e.Error.Param == nil || *e.Error.Param != c.param) {
			t.Errorf("%s %s: param %v, want %s", c.path, c.body, e.Error.Param, c.param)
		}
	}
	s.cfg.MaxBodyBytes = 1 << 12
	big := `{"input":"` + strings.Repeat("a", int(s.cfg.MaxBodyBytes)) + `"}`
	if code, _ := postTo(s, "/pooling", big); code != 413 {
		t.Errorf("oversized body: %d, want 413", code)
	}
}
