package sim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"sort"
	"strconv"
)

// The pooling endpoints a gateway forwards (vLLM's shapes): POST /v1/embeddings and the rerank
// routes (/rerank, /v1/rerank, /v2/rerank). They answer at once, outside the engine model (a
// pooling request keeps nothing in the KV cache a later request could reuse), and
// deterministically: an embedding is a unit vector drawn from a splitmix64 stream seeded by
// the input's token ids, and a rerank score is the share of the query's distinct tokens the
// document holds, so tests can predict both.

// embeddingDims is the size of an embedding when the request names no dimensions.
const embeddingDims = 16

// maxEmbeddingDims bounds the dimensions a request may ask for.
const maxEmbeddingDims = 4096

// handleEmbeddings serves POST /v1/embeddings: input as a string, an array of strings, an array
// of token ids or an array of such arrays; encoding_format float (default) or base64
// (little-endian float32, what the openai clients ask for); dimensions.
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat *string         `json:"encoding_format"`
		Dimensions     *int            `json:"dimensions"`
	}
	inputs, aerr := s.poolingBody(r, &req, func() json.RawMessage { return req.Input }, func() string { return req.Model })
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	dims := embeddingDims
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > maxEmbeddingDims {
			writeError(w, &apiError{status: http.StatusBadRequest, msg: "dimensions must be between 1 and " + strconv.Itoa(maxEmbeddingDims), param: "dimensions"})
			return
		}
		dims = *req.Dimensions
	}
	b64 := req.EncodingFormat != nil && *req.EncodingFormat == "base64"
	if req.EncodingFormat != nil && !b64 && *req.EncodingFormat != "float" {
		writeError(w, badRequest("encoding_format must be float or base64"))
		return
	}
	data := make([]map[string]any, len(inputs))
	total := 0
	for i, ids := range inputs {
		v := Embedding(ids, dims)
		total += len(ids)
		var emb any = v
		if b64 {
			buf := make([]byte, 4*len(v))
			for j, f := range v {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(f))
			}
			emb = base64.StdEncoding.EncodeToString(buf)
		}
		data[i] = map[string]any{"index": i, "object": "embedding", "embedding": emb}
	}
	writeJSON(w, map[string]any{"id": "embd-" + strconv.FormatUint(s.nextID.Add(1), 16), "object": "list", "created": s.created, "model": s.cfg.Model,
		"data": data, "usage": map[string]any{"prompt_tokens": total, "total_tokens": total, "completion_tokens": 0, "prompt_tokens_details": nil}})
}

// handleRerank serves the rerank routes: query and documents (strings), top_n, and
// return_documents (default true, as vLLM's).
func (s *Server) handleRerank(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model           string          `json:"model"`
		Query           *string         `json:"query"`
		Documents       json.RawMessage `json:"documents"`
		TopN            int             `json:"top_n"`
		ReturnDocuments *bool           `json:"return_documents"`
	}
	docs, aerr := s.poolingBody(r, &req, func() json.RawMessage { return req.Documents }, func() string { return req.Model })
	if aerr == nil && req.Query == nil {
		aerr = &apiError{status: http.StatusBadRequest, msg: "query is required", param: "query"}
	}
	if aerr == nil && s.cfg.Codec == nil {
		aerr = badRequest("rerank needs the model's tokenizer (start simworker with --tokenizer)")
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var texts []string
	_ = json.Unmarshal(req.Documents, &texts)
	q, err := s.cfg.Codec.Encode(*req.Query)
	if err != nil {
		writeError(w, badRequest("query: %v", err))
		return
	}
	total := 0
	results := make([]map[string]any, len(docs))
	for i, ids := range docs {
		total += len(q) + len(ids)
		res := map[string]any{"index": i, "relevance_score": RerankScore(q, ids)}
		if req.ReturnDocuments == nil || *req.ReturnDocuments {
			doc := map[string]any{"text": nil}
			if i < len(texts) {
				doc["text"] = texts[i]
			}
			res["document"] = doc
		}
		results[i] = res
	}
	sort.SliceStable(results, func(a, b int) bool {
		return results[a]["relevance_score"].(float64) > results[b]["relevance_score"].(float64)
	})
	if req.TopN > 0 && req.TopN < len(results) {
		results = results[:req.TopN]
	}
	writeJSON(w, map[string]any{"id": "rerank-" + strconv.FormatUint(s.nextID.Add(1), 16), "model": s.cfg.Model,
		"usage": map[string]any{"prompt_tokens": total, "total_tokens": total}, "results": results})
}

// poolingBody reads and decodes a pooling body into req, checks its model, and tokenizes the
// inputs the field named by field holds.
func (s *Server) poolingBody(r *http.Request, req any, field func() json.RawMessage, model func() string) ([][]uint32, *apiError) {
	body, aerr := s.readBody(r)
	if aerr != nil {
		return nil, aerr
	}
	if err := json.Unmarshal(body, req); err != nil {
		return nil, badRequest("invalid JSON body: %v", err)
	}
	if aerr := s.checkModel(model()); aerr != nil {
		return nil, aerr
	}
	return s.poolingInputs(field())
}

// poolingInputs tokenizes a string, an array of strings, an array of ids or an array of id
// arrays.
func (s *Server) poolingInputs(v json.RawMessage) ([][]uint32, *apiError) {
	var one string
	var many []string
	var ids []uint32
	var idss [][]uint32
	switch {
	case json.Unmarshal(v, &one) == nil:
		many = []string{one}
	case json.Unmarshal(v, &many) == nil && len(many) > 0:
	case json.Unmarshal(v, &ids) == nil && len(ids) > 0:
		return [][]uint32{ids}, s.checkPooled([][]uint32{ids})
	case json.Unmarshal(v, &idss) == nil && len(idss) > 0:
		return idss, s.checkPooled(idss)
	default:
		return nil, badRequest("input must be a string, an array of strings or an array of token ids, not empty")
	}
	if s.cfg.Codec == nil {
		return nil, badRequest("text inputs need the model's tokenizer (start simworker with --tokenizer)")
	}
	out := make([][]uint32, len(many))
	for i, t := range many {
		e, err := s.cfg.Codec.Encode(t)
		if err != nil {
			return nil, badRequest("input %d: %v", i, err)
		}
		out[i] = e
	}
	return out, s.checkPooled(out)
}

// checkPooled refuses what vLLM refuses before pooling: a token id outside the vocabulary and
// an input longer than the context (pooling generates nothing, so the whole context is the
// input's).
func (s *Server) checkPooled(inputs [][]uint32) *apiError {
	cfg := s.ranks[0].Config()
	for _, ids := range inputs {
		if len(ids) == 0 {
			return &apiError{status: http.StatusBadRequest, msg: "an input has no tokens", param: "input"}
		}
		for _, id := range ids {
			if int(id) >= cfg.VocabSize {
				return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("Token id %d is out of vocabulary", id), param: "input"}
			}
		}
		if len(ids) > cfg.MaxModelLen {
			return &apiError{status: http.StatusBadRequest, param: "input", msg: fmt.Sprintf(
				"This model's maximum context length is %d tokens. However, you requested %d tokens in the input. Please reduce the length of the input.",
				cfg.MaxModelLen, len(ids))}
		}
	}
	return nil
}

// Embedding is the simulator's embedding of ids: a unit vector of dims float32s from a
// splitmix64 stream seeded by an FNV-1a hash of the ids.
func Embedding(ids []uint32, dims int) []float32 {
	h := fnv.New64a()
	var b [4]byte
	for _, id := range ids {
		binary.LittleEndian.PutUint32(b[:], id)
		_, _ = h.Write(b[:])
	}
	x := h.Sum64()
	v := make([]float32, dims)
	var norm float64
	for i := range v {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		f := float64(z>>11)/float64(1<<53)*2 - 1
		v[i] = float32(f)
		norm += f * f
	}
	if norm > 0 {
		n := float32(math.Sqrt(norm))
		for i := range v {
			v[i] /= n
		}
	}
	return v
}

// RerankScore is the share of the query's distinct token ids that the document holds.
func RerankScore(query, doc []uint32) float64 {
	in := make(map[uint32]bool, len(doc))
	for _, id := range doc {
		in[id] = true
	}
	seen := map[uint32]bool{}
	hit := 0
	for _, id := range query {
		if seen[id] {
			continue
		}
		seen[id] = true
		if in[id] {
			hit++
		}
	}
	if len(seen) == 0 {
		return 0
	}
	return float64(hit) / float64(len(seen))
}

// writeJSON writes v as a 200 JSON body.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
