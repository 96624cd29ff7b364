package endpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/kvgate/kvgate/pkg/openai"
)

// The render routes' sampling_params: vLLM's SamplingParams as its request's
// to_sampling_params builds it (ChatCompletionRequest, CompletionRequest; the request's value,
// else the model's generation_config.json default, else vLLM's), then __post_init__ and
// _verify_args, then serialized as vLLM serializes it (msgspec omit_defaults: only the fields
// that differ from their declared default, in declaration order; private fields dropped).
//
// max_tokens is vLLM's get_max_tokens: the least of the request's (chat:
// max_completion_tokens, else max_tokens; completions: max_tokens, default 16), else
// generation_config's max_new_tokens, and max_model_len − prompt length, where max_model_len
// is --max-prompt-tokens (as /tokenize answers it). When none of them is known (a chat
// request without max_tokens, no max_new_tokens, no --max-prompt-tokens) it is left out:
// the engine that receives the request then applies its own default, which is vLLM's
// "not provided" case of /inference/v1/generate, rather than the gateway guessing a
// context length.

// requestKind tells the chat and completion rules of to_sampling_params apart.
type requestKind int

const (
	chatKind requestKind = iota
	completionKind
)

// streamOptions is vLLM's StreamOptions as the render answer writes it.
type streamOptions struct {
	IncludeUsage         *bool `json:"include_usage"`
	ContinuousUsageStats *bool `json:"continuous_usage_stats"`
}

// repetitionDetection is vLLM's RepetitionDetectionParams (every field written).
type repetitionDetection struct {
	MaxPatternSize int64 `json:"max_pattern_size"`
	MinPatternSize int64 `json:"min_pattern_size"`
	MinCount       int64 `json:"min_count"`
}

// renderFields are the request fields the render answer reads besides the prompt: nil when
// absent or null.
type renderFields struct {
	Model         *string        `json:"model"`
	Stream        *bool          `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options"`
	CacheSalt     *string        `json:"cache_salt"`
	Priority      *int64         `json:"priority"`

	N                          *int64               `json:"n"`
	PresencePenalty            *float64             `json:"presence_penalty"`
	FrequencyPenalty           *float64             `json:"frequency_penalty"`
	RepetitionPenalty          *float64             `json:"repetition_penalty"`
	Temperature                *float64             `json:"temperature"`
	TopP                       *float64             `json:"top_p"`
	TopK                       *int64               `json:"top_k"`
	MinP                       *float64             `json:"min_p"`
	Seed                       *int64               `json:"seed"`
	Stop                       json.RawMessage      `json:"stop"`
	StopTokenIDs               []int64              `json:"stop_token_ids"`
	IgnoreEOS                  *bool                `json:"ignore_eos"`
	MaxTokens                  json.RawMessage      `json:"max_tokens"`
	MaxCompletionTokens        *int64               `json:"max_completion_tokens"`
	MinTokens                  *int64               `json:"min_tokens"`
	Logprobs                   json.RawMessage      `json:"logprobs"`
	TopLogprobs                *int64               `json:"top_logprobs"`
	PromptLogprobs             *int64               `json:"prompt_logprobs"`
	LogprobTokenIDs            []int64              `json:"logprob_token_ids"`
	Echo                       *bool                `json:"echo"`
	SkipSpecialTokens          *bool                `json:"skip_special_tokens"`
	SpacesBetweenSpecialTokens *bool                `json:"spaces_between_special_tokens"`
	IncludeStopStrInOutput     *bool                `json:"include_stop_str_in_output"`
	StreamInterval             *int64               `json:"stream_interval"`
	LogitBias                  json.RawMessage      `json:"logit_bias"`
	AllowedTokenIDs            []int64              `json:"allowed_token_ids"`
	VLLMXargs                  json.RawMessage      `json:"vllm_xargs"`
	KVTransferParams           json.RawMessage      `json:"kv_transfer_params"`
	ECTransferParams           json.RawMessage      `json:"ec_transfer_params"`
	BadWords                   []string             `json:"bad_words"`
	ThinkingTokenBudget        *int64               `json:"thinking_token_budget"`
	RepetitionDetection        *repetitionDetection `json:"repetition_detection"`
	RoutedExpertsPromptStart   *int64               `json:"routed_experts_prompt_start"`
	AddSpecialTokens           *bool                `json:"add_special_tokens"`

	// What the gateway does not compute (unsupported).
	UseBeamSearch        *bool           `json:"use_beam_search"`
	ResponseFormat       json.RawMessage `json:"response_format"`
	StructuredOutputs    json.RawMessage `json:"structured_outputs"`
	TruncatePromptTokens *int64          `json:"truncate_prompt_tokens"`
}

// decode reads the fields of body; a field of the wrong type is a 400 naming it.
func (f *renderFields) decode(body []byte) *openai.Error {
	if err := json.Unmarshal(body, f); err != nil {
		var te *json.UnmarshalTypeError
		if ok := asTypeError(err, &te); ok {
			return openai.BadRequest(te.Field, fmt.Sprintf("%s: expected %s, got JSON %s", te.Field, te.Type, te.Value))
		}
		return openai.BadRequest("", "invalid JSON body: "+err.Error())
	}
	return nil
}

// asTypeError reports whether err is a *json.UnmarshalTypeError, setting *te.
func asTypeError(err error, te **json.UnmarshalTypeError) bool {
	t, ok := err.(*json.UnmarshalTypeError)
	*te = t
	return ok
}

// unsupported refuses what the gateway's render does not compute as vLLM does.
func (f *renderFields) unsupported() *openai.Error {
	switch {
	case f.UseBeamSearch != nil && *f.UseBeamSearch:
		return openai.BadRequest("use_beam_search", "Beam search is not supported by the render endpoint")
	case f.StructuredOutputs != nil && !isJSONNull(f.StructuredOutputs):
		return notComputed("structured_outputs", "structured_outputs (the engine's structured-output parameters)")
	case f.ResponseFormat != nil && !isJSONNull(f.ResponseFormat) && !isTextFormat(f.ResponseFormat):
		return notComputed("response_format", "a response_format other than text (the engine's structured-output parameters)")
	case f.TruncatePromptTokens != nil:
		return notComputed("truncate_prompt_tokens", "truncate_prompt_tokens (the engine's tokenizer's truncation)")
	}
	return nil
}

func isJSONNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// isTextFormat reports whether a response_format is {"type": "text"}, which constrains nothing.
func isTextFormat(v json.RawMessage) bool {
	var rf struct{ Type string }
	return json.Unmarshal(v, &rf) == nil && rf.Type == "text"
}

// spField is one written field of sampling_params.
type spField struct {
	key string
	val any
}

// samplingValues are the SamplingParams fields a render computes.
type samplingValues struct {
	n                                                        int64
	presence, frequency, repetition, temperature, topP, minP float64
	topK                                                     int64
	seed, logprobs, promptLogprobs, budget                   *int64
	stop, badWords                                           []string
	stopIDs                                                  []int64
	maxTokens                                                int64
	maxKnown                                                 bool
	logitBias, extra                                         json.RawMessage
}

// sampling returns the sampling_params JSON object for one prompt of promptLen tokens, or
// vLLM's validation error.
func (f *renderFields) sampling(kind requestKind, promptLen, maxModelLen int, gen Generation) ([]byte, *openai.Error) {
	v, aerr := f.resolve(kind, promptLen, maxModelLen, gen)
	if aerr != nil {
		return nil, aerr
	}
	// __post_init__: the minimum temperature, _verify_args, then greedy sampling.
	if v.temperature > 0 && v.temperature < 1e-2 {
		v.temperature = 1e-2
	}
	if aerr := verifySampling(&v, deref(f.MinTokens), f.StreamInterval); aerr != nil {
		return nil, aerr
	}
	if v.temperature < 1e-5 {
		v.topP, v.topK, v.minP = 1, 0, 0
		if v.n > 1 {
			return nil, openai.BadRequest("n", fmt.Sprintf("n must be 1 when using greedy sampling, got %d.", v.n))
		}
	}
	return f.write(&v), nil
}

// resolve takes each value from the request, else the generation defaults, else vLLM's
// (to_sampling_params and SamplingParams.from_optional).
func (f *renderFields) resolve(kind requestKind, promptLen, maxModelLen int, gen Generation) (samplingValues, *openai.Error) {
	fl := func(req *float64, def *float64, vllm float64) float64 {
		switch {
		case req != nil:
			return *req
		case def != nil:
			return *def
		}
		return vllm
	}
	v := samplingValues{n: 1, presence: deref(f.PresencePenalty), frequency: deref(f.FrequencyPenalty),
		repetition: fl(f.RepetitionPenalty, gen.RepetitionPenalty, 1), temperature: fl(f.Temperature, gen.Temperature, 1),
		topP: fl(f.TopP, gen.TopP, 1), minP: fl(f.MinP, gen.MinP, 0), seed: f.Seed, budget: f.ThinkingTokenBudget}
	if f.N != nil {
		v.n = *f.N
	}
	switch {
	case f.TopK != nil:
		v.topK = *f.TopK
	case gen.TopK != nil:
		v.topK = *gen.TopK
	}
	if v.seed != nil && *v.seed == -1 {
		v.seed = nil
	}
	if v.budget != nil && *v.budget == -1 {
		v.budget = nil
	}
	var aerr *openai.Error
	if v.stop, aerr = f.stops(); aerr != nil {
		return v, aerr
	}
	v.stopIDs, v.badWords = dedup(f.StopTokenIDs), dedup(f.BadWords)
	for _, w := range v.badWords {
		if w == "" {
			return v, openai.BadRequest("bad_words", fmt.Sprintf("bad_words cannot contain an empty string. Got bad_words=%s", pyStrList(v.badWords)))
		}
	}
	if v.logprobs, v.promptLogprobs, aerr = f.logprobs(kind); aerr != nil {
		return v, aerr
	}
	if v.maxTokens, v.maxKnown, aerr = f.maxTokens(kind, promptLen, maxModelLen, gen); aerr != nil {
		return v, aerr
	}
	if v.logitBias, aerr = f.logitBias(); aerr != nil {
		return v, aerr
	}
	v.extra, aerr = f.extraArgs()
	return v, aerr
}

// logprobs returns the logprobs and prompt_logprobs fields: chat's logprobs are top_logprobs
// when logprobs is true, completions' the number; echo asks for prompt logprobs alike.
func (f *renderFields) logprobs(kind requestKind) (logprobs, prompt *int64, aerr *openai.Error) {
	prompt = f.PromptLogprobs
	var lp *int64
	switch kind {
	case chatKind:
		var on bool
		if f.Logprobs != nil && !isJSONNull(f.Logprobs) && json.Unmarshal(f.Logprobs, &on) != nil {
			return nil, nil, openai.BadRequest("logprobs", "logprobs must be a boolean")
		}
		top := deref(f.TopLogprobs)
		lp = &top
		if !on {
			logprobs = nil
		} else if len(f.LogprobTokenIDs) == 0 {
			logprobs = lp
		}
	case completionKind:
		if f.Logprobs != nil && !isJSONNull(f.Logprobs) {
			var n int64
			if json.Unmarshal(f.Logprobs, &n) != nil {
				return nil, nil, openai.BadRequest("logprobs", "logprobs must be an integer")
			}
			lp = &n
		}
		if len(f.LogprobTokenIDs) == 0 {
			logprobs = lp
		}
	}
	if prompt == nil && deref(f.Echo) {
		prompt = lp
	}
	return logprobs, prompt, nil
}

// write serializes v as vLLM does: msgspec omit_defaults, in vllm.SamplingParams'
// declaration order, a field at its default left out.
func (f *renderFields) write(v *samplingValues) []byte {
	includeStop := deref(f.IncludeStopStrInOutput)
	bufLen := 0
	if !includeStop {
		for _, s := range v.stop {
			bufLen = max(bufLen, utf8.RuneCountInString(s)-1)
		}
	}
	output := 2 // RequestOutputKind.FINAL_ONLY
	if deref(f.Stream) {
		output = 1 // DELTA
	}
	var fields []spField
	add := func(cond bool, key string, val any) {
		if cond {
			fields = append(fields, spField{key, val})
		}
	}
	add(v.n != 1, "n", v.n)
	add(v.presence != 0, "presence_penalty", v.presence)
	add(v.frequency != 0, "frequency_penalty", v.frequency)
	add(v.repetition != 1, "repetition_penalty", v.repetition)
	add(v.temperature != 1, "temperature", v.temperature)
	add(v.topP != 1, "top_p", v.topP)
	add(v.topK != 0, "top_k", v.topK)
	add(v.minP != 0, "min_p", v.minP)
	add(v.seed != nil, "seed", v.seed)
	add(true, "stop", v.stop)
	add(true, "stop_token_ids", v.stopIDs)
	add(deref(f.IgnoreEOS), "ignore_eos", true)
	add(v.maxKnown && v.maxTokens != 16, "max_tokens", v.maxTokens)
	add(deref(f.MinTokens) != 0, "min_tokens", deref(f.MinTokens))
	add(v.logprobs != nil, "logprobs", v.logprobs)
	add(v.promptLogprobs != nil, "prompt_logprobs", v.promptLogprobs)
	add(len(f.LogprobTokenIDs) > 0, "logprob_token_ids", f.LogprobTokenIDs)
	add(f.SkipSpecialTokens != nil && !*f.SkipSpecialTokens, "skip_special_tokens", false)
	add(f.SpacesBetweenSpecialTokens != nil && !*f.SpacesBetweenSpecialTokens, "spaces_between_special_tokens", false)
	add(includeStop, "include_stop_str_in_output", true)
	add(true, "output_kind", output)
	add(f.StreamInterval != nil, "stream_interval", f.StreamInterval)
	add(true, "skip_clone", true)
	add(bufLen != 0, "output_text_buffer_length", bufLen)
	add(v.logitBias != nil, "logit_bias", v.logitBias)
	add(f.AllowedTokenIDs != nil, "allowed_token_ids", f.AllowedTokenIDs)
	add(v.extra != nil, "extra_args", v.extra)
	add(true, "bad_words", v.badWords)
	add(true, "skip_reading_prefix_cache", v.promptLogprobs != nil)
	add(v.budget != nil, "thinking_token_budget", v.budget)
	add(f.RepetitionDetection != nil, "repetition_detection", f.RepetitionDetection)
	add(deref(f.RoutedExpertsPromptStart) != 0, "routed_experts_prompt_start", f.RoutedExpertsPromptStart)
	b := []byte{'{'}
	for i, fd := range fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSON(b, fd.key)
		b = append(b, ':')
		b = appendJSON(b, fd.val)
	}
	return append(b, '}')
}

// maxTokens is vLLM's get_max_tokens (see the top of this file); known is false when the
// gateway has none of its inputs.
func (f *renderFields) maxTokens(kind requestKind, promptLen, maxModelLen int, gen Generation) (int64, bool, *openai.Error) {
	var req *int64
	switch {
	case kind == chatKind && f.MaxCompletionTokens != nil:
		req = f.MaxCompletionTokens
	case f.MaxTokens != nil && !isJSONNull(f.MaxTokens):
		var v int64
		if err := json.Unmarshal(f.MaxTokens, &v); err != nil {
			return 0, false, openai.BadRequest("max_tokens", "max_tokens must be an integer")
		}
		req = &v
	case kind == completionKind && f.MaxTokens == nil:
		req = ptr(int64(16)) // CompletionRequest.max_tokens defaults to 16; null unsets it
	}
	if kind == completionKind && deref(f.Echo) && req != nil && *req == 0 {
		return 1, true, nil // echo without generation
	}
	if req == nil {
		req = gen.MaxTokens
	}
	var out int64
	known := false
	if maxModelLen > 0 {
		if promptLen > maxModelLen {
			return 0, false, openai.BadRequest("", fmt.Sprintf("Input length (%d) exceeds model's maximum context length (%d).", promptLen, maxModelLen))
		}
		out, known = int64(maxModelLen-promptLen), true
	}
	if req != nil && (!known || *req < out) {
		out, known = *req, true
	}
	return out, known, nil
}

// stops returns stop as a list (a string is one stop; absent or null none), each non-empty.
func (f *renderFields) stops() ([]string, *openai.Error) {
	stop := []string{}
	if f.Stop != nil && !isJSONNull(f.Stop) {
		var one string
		if json.Unmarshal(f.Stop, &one) == nil {
			stop = []string{one}
		} else if err := json.Unmarshal(f.Stop, &stop); err != nil {
			return nil, openai.BadRequest("stop", "stop must be a string or a list of strings")
		}
	}
	for _, s := range stop {
		if s == "" {
			return nil, openai.BadRequest("stop", "stop cannot contain an empty string.")
		}
	}
	return stop, nil
}

// logitBias returns logit_bias with integer token keys in the client's order and each bias
// clamped to [-100, 100] (SamplingParams.from_optional), as an ordered JSON object.
func (f *renderFields) logitBias() (json.RawMessage, *openai.Error) {
	if f.LogitBias == nil || isJSONNull(f.LogitBias) {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(f.LogitBias))
	bad := openai.BadRequest("logit_bias", "logit_bias must be an object of token ids to numbers")
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, bad
	}
	b := []byte{'{'}
	var invalid []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, bad
		}
		key := t.(string)
		var bias float64
		if err := dec.Decode(&bias); err != nil {
			return nil, bad
		}
		id, err := strconv.ParseInt(key, 10, 64)
		if err != nil {
			invalid = append(invalid, key)
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendJSON(b, strconv.FormatInt(id, 10))
		b = append(b, ':')
		b = appendJSON(b, math.Min(100, math.Max(-100, bias)))
	}
	if len(invalid) > 0 {
		return nil, openai.BadRequest("logit_bias", "logit_bias contains key(s) that cannot be converted to integer token IDs: "+pyStrList(invalid))
	}
	return append(b, '}'), nil
}

// extraArgs returns vllm_xargs with kv_transfer_params and ec_transfer_params added, as
// to_sampling_params passes them (nil when there are none).
func (f *renderFields) extraArgs() (json.RawMessage, *openai.Error) {
	has := func(v json.RawMessage) bool {
		return v != nil && !isJSONNull(v) && !bytes.Equal(bytes.TrimSpace(v), []byte("{}"))
	}
	if !has(f.VLLMXargs) && !has(f.KVTransferParams) && !has(f.ECTransferParams) {
		return nil, nil
	}
	b := []byte{'{'}
	if has(f.VLLMXargs) {
		inner := bytes.TrimSpace(f.VLLMXargs)
		if len(inner) < 2 || inner[0] != '{' {
			return nil, openai.BadRequest("vllm_xargs", "vllm_xargs must be an object")
		}
		b = append(b, bytes.TrimSpace(inner[1:len(inner)-1])...)
	}
	for _, kv := range []struct {
		key string
		v   json.RawMessage
	}{{"kv_transfer_params", f.KVTransferParams}, {"ec_transfer_params", f.ECTransferParams}} {
		if has(kv.v) {
			if len(b) > 1 {
				b = append(b, ',')
			}
			b = appendJSON(b, kv.key)
			b = append(b, ':')
			b = append(b, bytes.TrimSpace(kv.v)...)
		}
	}
	return append(b, '}'), nil
}

// verifySampling is SamplingParams._verify_args, with vLLM's messages.
func verifySampling(v *samplingValues, minTokens int64, streamInterval *int64) *openai.Error {
	g := pyFloat
	switch {
	case v.n < 1:
		return openai.BadRequest("n", fmt.Sprintf("n must be at least 1, got %d.", v.n))
	case v.presence < -2 || v.presence > 2:
		return openai.BadRequest("presence_penalty", "presence_penalty must be in [-2, 2], got "+g(v.presence)+".")
	case v.frequency < -2 || v.frequency > 2:
		return openai.BadRequest("frequency_penalty", "frequency_penalty must be in [-2, 2], got "+g(v.frequency)+".")
	case math.IsNaN(v.repetition) || math.IsInf(v.repetition, 0):
		return openai.BadRequest("repetition_penalty", "repetition_penalty must be a finite number, got "+g(v.repetition)+".")
	case v.repetition <= 0:
		return openai.BadRequest("repetition_penalty", "repetition_penalty must be greater than zero, got "+g(v.repetition)+".")
	case v.temperature < 0:
		return openai.BadRequest("temperature", "temperature must be non-negative, got "+g(v.temperature)+".")
	case v.temperature > 2:
		return openai.BadRequest("temperature", "temperature must be in [0, 2], got "+g(v.temperature)+".")
	case !(v.topP > 0 && v.topP <= 1):
		return openai.BadRequest("top_p", "top_p must be in (0, 1], got "+g(v.topP)+".")
	case v.topK < -1:
		return openai.BadRequest("top_k", fmt.Sprintf("top_k must be 0 (disable), or at least 1, got %d.", v.topK))
	case v.minP < 0 || v.minP > 1:
		return openai.BadRequest("min_p", "min_p must be in [0, 1], got "+g(v.minP)+".")
	case v.maxKnown && v.maxTokens < 1:
		return openai.BadRequest("max_tokens", fmt.Sprintf("max_tokens must be at least 1, got %d.", v.maxTokens))
	case minTokens < 0:
		return openai.BadRequest("min_tokens", fmt.Sprintf("min_tokens must be greater than or equal to 0, got %d.", minTokens))
	case v.maxKnown && minTokens > v.maxTokens:
		return openai.BadRequest("min_tokens", fmt.Sprintf("min_tokens must be less than or equal to max_tokens=%d, got %d.", v.maxTokens, minTokens))
	case streamInterval != nil && *streamInterval < 1:
		return openai.BadRequest("stream_interval", fmt.Sprintf("stream_interval must be at least 1, got %d.", *streamInterval))
	case v.logprobs != nil && *v.logprobs != -1 && *v.logprobs < 0:
		return openai.BadRequest("logprobs", fmt.Sprintf("logprobs must be non-negative or -1, got %d.", *v.logprobs))
	case v.promptLogprobs != nil && *v.promptLogprobs != -1 && *v.promptLogprobs < 0:
		return openai.BadRequest("prompt_logprobs", fmt.Sprintf("prompt_logprobs must be non-negative or -1, got %d.", *v.promptLogprobs))
	}
	return nil
}

// pyFloat formats v as Python's repr of a float (1.0, 0.5, 1e-05).
func pyFloat(v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !bytes.ContainsAny([]byte(s), ".eIN") {
		s += ".0"
	}
	return s
}

// pyStrList formats strs as Python's repr of a list of strings (simple strings only).
func pyStrList(strs []string) string {
	b := []byte{'['}
	for i, s := range strs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '\'')
		b = append(b, s...)
		b = append(b, '\'')
	}
	return string(append(b, ']'))
}

// dedup returns vs without repeats, first occurrences in order, never nil (dict.fromkeys).
func dedup[T comparable](vs []T) []T {
	out := make([]T, 0, len(vs))
	seen := make(map[T]bool, len(vs))
	for _, v := range vs {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
