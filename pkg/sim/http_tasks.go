package sim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"

	"github.com/kvgate/kvgate/pkg/openai"
)

// vLLM's other pooling endpoints: POST /pooling, /classify, /score and /v1/score, answered like
// the embeddings and rerank routes (at once, outside the engine model, deterministically from
// the inputs' token ids). The simulated model pools for every task vLLM names (embed, classify,
// token_embed, token_classify), embed by default, where a real model serves only its one
// pooling task; it classifies into numClasses labels named as Transformers names them when a
// config has no id2label (LABEL_0, LABEL_1).

// numClasses is how many labels the simulated classifier has.
const numClasses = 2

// poolingTasks are the /pooling tasks the simulator answers, the first being the default.
var poolingTasks = []string{"embed", "classify", "token_embed", "token_classify"}

// taskRequest is what /pooling and /classify share: vLLM's completion form (input) or chat
// form (messages with the chat options), use_activation, and the parameter vLLM removed.
type taskRequest struct {
	Model               string          `json:"model"`
	Input               json.RawMessage `json:"input"`
	Messages            json.RawMessage `json:"messages"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	UseActivation       *bool           `json:"use_activation"`
	Normalize           json.RawMessage `json:"normalize"`
	Task                *string         `json:"task"`
	EncodingFormat      *string         `json:"encoding_format"`
	Dimensions          *int            `json:"dimensions"`
}

// handlePooling serves POST /pooling: one result per input, its data an embedding (embed), the
// class probabilities (classify), or one of those per token (token_embed, token_classify), as
// floats or base64 little-endian float32s.
func (s *Server) handlePooling(w http.ResponseWriter, r *http.Request) {
	var req taskRequest
	inputs, aerr := s.taskInputs(r, &req)
	if aerr == nil && req.Dimensions != nil {
		aerr = &apiError{status: http.StatusBadRequest, msg: "dimensions is currently not supported", param: "dimensions"}
	}
	task := poolingTasks[0]
	if aerr == nil && req.Task != nil {
		task = *req.Task
		if !knownTask(task) {
			aerr = &apiError{status: http.StatusBadRequest, msg: "Unsupported task: '" + task + "' Supported tasks: ('embed', 'classify', 'token_embed', 'token_classify')", param: "task"}
		}
	}
	b64 := req.EncodingFormat != nil && *req.EncodingFormat == "base64"
	if aerr == nil && req.EncodingFormat != nil && !b64 && *req.EncodingFormat != "float" {
		aerr = &apiError{status: http.StatusBadRequest, msg: "encoding_format must be float or base64 (the simulator does not stream bytes)", param: "encoding_format"}
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	activate := req.UseActivation == nil || *req.UseActivation
	data := make([]map[string]any, len(inputs))
	for i, ids := range inputs {
		var out any
		switch task {
		case "embed":
			out = Embedding(ids, embeddingDims)
		case "classify":
			out = ClassProbs(ids, activate)
		default:
			rows := make([][]float32, len(ids))
			for j, id := range ids {
				if task == "token_embed" {
					rows[j] = Embedding([]uint32{id}, embeddingDims)
				} else {
					rows[j] = ClassProbs([]uint32{id}, activate)
				}
			}
			out = rows
		}
		if b64 {
			out = base64Floats(out)
		}
		data[i] = map[string]any{"index": i, "object": "pooling", "data": out}
	}
	writeJSON(w, map[string]any{"id": "pooling-" + strconv.FormatUint(s.nextID.Add(1), 16), "object": "list", "created": s.created,
		"model": s.cfg.Model, "data": data, "usage": poolingUsage(promptTokens(inputs))})
}

// handleClassify serves POST /classify: per input the class probabilities (raw logits with
// use_activation false), the most likely label and the number of classes.
func (s *Server) handleClassify(w http.ResponseWriter, r *http.Request) {
	var req taskRequest
	inputs, aerr := s.taskInputs(r, &req)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	data := make([]map[string]any, len(inputs))
	for i, ids := range inputs {
		probs := ClassProbs(ids, req.UseActivation == nil || *req.UseActivation)
		best := 0
		for k, p := range probs {
			if p > probs[best] {
				best = k
			}
		}
		data[i] = map[string]any{"index": i, "label": "LABEL_" + strconv.Itoa(best), "probs": probs, "num_classes": len(probs)}
	}
	writeJSON(w, map[string]any{"id": "classify-" + strconv.FormatUint(s.nextID.Add(1), 16), "object": "list", "created": s.created,
		"model": s.cfg.Model, "data": data, "usage": poolingUsage(promptTokens(inputs))})
}

// handleScore serves POST /score and /v1/score: the pairs of queries and documents (or items,
// data_1/data_2, the legacy text_1/text_2), one to one or one query to many, each scored as
// the rerank routes score (RerankScore).
func (s *Server) handleScore(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model     string          `json:"model"`
		Queries   json.RawMessage `json:"queries"`
		Documents json.RawMessage `json:"documents"`
		Items     json.RawMessage `json:"items"`
		Data1     json.RawMessage `json:"data_1"`
		Data2     json.RawMessage `json:"data_2"`
		Text1     json.RawMessage `json:"text_1"`
		Text2     json.RawMessage `json:"text_2"`
		Normalize json.RawMessage `json:"normalize"`
	}
	var left, right [][]uint32
	body, aerr := s.readBody(r)
	if aerr == nil {
		if err := json.Unmarshal(body, &req); err != nil {
			aerr = badRequest("invalid JSON body: %v", err)
		}
	}
	if aerr == nil {
		aerr = s.checkModel(req.Model)
	}
	if aerr == nil && req.Normalize != nil {
		aerr = removedNormalize()
	}
	if aerr == nil {
		l, rt, name := scorePair(req.Queries, req.Documents, req.Items, req.Data1, req.Data2, req.Text1, req.Text2)
		left, right, aerr = s.scoreInputs(l, rt, name)
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	data := make([]map[string]any, len(right))
	total := 0
	for i, doc := range right {
		q := left[0]
		if len(left) > 1 {
			q = left[i]
		}
		total += len(q) + len(doc)
		data[i] = map[string]any{"index": i, "object": "score", "score": RerankScore(q, doc)}
	}
	writeJSON(w, map[string]any{"id": "score-" + strconv.FormatUint(s.nextID.Add(1), 16), "object": "list", "created": s.created,
		"model": s.cfg.Model, "data": data, "usage": poolingUsage(total)})
}

// scorePair picks the two sides of a score request in the order vLLM's request union tries
// its forms, and names the first side's field for errors.
func scorePair(queries, documents, items, data1, data2, text1, text2 json.RawMessage) (json.RawMessage, json.RawMessage, string) {
	switch {
	case queries != nil && documents != nil:
		return queries, documents, "queries"
	case queries != nil && items != nil:
		return queries, items, "queries"
	case data1 != nil && data2 != nil:
		return data1, data2, "data_1"
	case text1 != nil || text2 != nil:
		return text1, text2, "text_1"
	}
	return nil, nil, "queries"
}

// scoreInputs tokenizes both sides of a score request (each a string or an array of strings)
// and checks they pair up 1:1, 1:N or N:N.
func (s *Server) scoreInputs(l, r json.RawMessage, name string) ([][]uint32, [][]uint32, *apiError) {
	if l == nil || r == nil {
		return nil, nil, &apiError{status: http.StatusBadRequest, msg: "a score request needs queries and documents (or items, data_1 and data_2, text_1 and text_2)", param: name}
	}
	var sides [2][]string
	for i, raw := range []json.RawMessage{l, r} {
		var one string
		if json.Unmarshal(raw, &one) == nil {
			sides[i] = []string{one}
		} else if json.Unmarshal(raw, &sides[i]) != nil {
			return nil, nil, &apiError{status: http.StatusBadRequest, msg: "score inputs must be strings or arrays of strings (the simulator scores no multimodal content)", param: name}
		}
	}
	if len(sides[0]) == 0 || len(sides[1]) == 0 {
		return nil, nil, &apiError{status: http.StatusBadRequest, msg: "At least one text element must be given", param: name}
	}
	if len(sides[0]) > 1 && len(sides[0]) != len(sides[1]) {
		return nil, nil, &apiError{status: http.StatusBadRequest, msg: "Input lengths must be either 1:1, 1:N or N:N", param: name}
	}
	if s.cfg.Codec == nil {
		return nil, nil, badRequest("score needs the model's tokenizer (start simworker with --tokenizer)")
	}
	var out [2][][]uint32
	for i, texts := range sides {
		for _, t := range texts {
			ids, err := s.cfg.Codec.Encode(t)
			if err != nil {
				return nil, nil, badRequest("%s: %v", name, err)
			}
			out[i] = append(out[i], ids)
		}
	}
	// A cross-encoder reads each pair as one input.
	for i, d := range out[1] {
		q := out[0][min(i, len(out[0])-1)]
		if aerr := s.checkPooled([][]uint32{append(slices.Clip(q), d...)}); aerr != nil {
			aerr.param = name
			return nil, nil, aerr
		}
	}
	return out[0], out[1], nil
}

// taskInputs reads a /pooling or /classify body into req and tokenizes its inputs: input as
// /v1/embeddings takes it, or messages rendered with the chat template (without the
// generation prompt unless asked, vLLM's default for pooling).
func (s *Server) taskInputs(r *http.Request, req *taskRequest) ([][]uint32, *apiError) {
	body, aerr := s.readBody(r)
	if aerr != nil {
		return nil, aerr
	}
	if err := json.Unmarshal(body, req); err != nil {
		return nil, badRequest("invalid JSON body: %v", err)
	}
	if aerr := s.checkModel(req.Model); aerr != nil {
		return nil, aerr
	}
	if req.Normalize != nil {
		return nil, removedNormalize()
	}
	if req.Messages == nil {
		if req.Input == nil {
			return nil, &apiError{status: http.StatusBadRequest, msg: "input (or messages) is required", param: "input"}
		}
		return s.poolingInputs(req.Input)
	}
	if s.cfg.Chat == nil {
		return nil, badRequest("%s", noTemplateMessage)
	}
	if req.AddGenerationPrompt == nil {
		// openai.ParseChat defaults add_generation_prompt to true, as chat completions do.
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, badRequest("invalid JSON body: %v", err)
		}
		m["add_generation_prompt"] = json.RawMessage("false")
		body, _ = json.Marshal(m)
	}
	chat, oerr := openai.ParseChat(body, openai.Limits{MaxN: maxN})
	if oerr != nil {
		return nil, fromOpenAI(oerr)
	}
	res, oerr := s.cfg.Chat.Render(chat)
	if oerr != nil {
		return nil, fromOpenAI(oerr)
	}
	out := [][]uint32{res.TokenIDs}
	if aerr := s.checkPooled(out); aerr != nil {
		aerr.param = "messages"
		return nil, aerr
	}
	return out, nil
}

func removedNormalize() *apiError {
	return &apiError{status: http.StatusBadRequest, msg: "Parameter `normalize` was removed; use `use_activation` instead.", param: "normalize"}
}

func knownTask(t string) bool {
	for _, k := range poolingTasks {
		if k == t {
			return true
		}
	}
	return false
}

func promptTokens(inputs [][]uint32) int {
	n := 0
	for _, ids := range inputs {
		n += len(ids)
	}
	return n
}

// poolingUsage is vLLM's UsageInfo for a pooling answer: prompt tokens only.
func poolingUsage(prompt int) map[string]any {
	return map[string]any{"prompt_tokens": prompt, "total_tokens": prompt, "completion_tokens": 0, "prompt_tokens_details": nil}
}

// base64Floats encodes a vector or a matrix (flattened row by row) as base64 little-endian
// float32s.
func base64Floats(v any) string {
	var flat []float32
	switch x := v.(type) {
	case []float32:
		flat = x
	case [][]float32:
		for _, row := range x {
			flat = append(flat, row...)
		}
	}
	buf := make([]byte, 4*len(flat))
	for j, f := range flat {
		binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(buf)
}

// ClassProbs is the simulator's classification of ids: numClasses logits (4× the first
// coordinates of Embedding(ids)), softmaxed unless activate is false.
func ClassProbs(ids []uint32, activate bool) []float32 {
	e := Embedding(ids, numClasses)
	out := make([]float32, numClasses)
	var sum float64
	for k, x := range e {
		out[k] = 4 * x
		sum += math.Exp(float64(out[k]))
	}
	if activate {
		for k := range out {
			out[k] = float32(math.Exp(float64(out[k])) / sum)
		}
	}
	return out
}
