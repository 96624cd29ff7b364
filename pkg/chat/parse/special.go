package parse

// Decoding settings. vLLM decodes the engine's ids with the request's skip_special_tokens
// (default true) unless the tool parser's adjust_request changes it, and its detokenizer never
// shows the stop token that ended generation (EOS, <|im_end|>, <|eot_id|>). The gateway decodes
// the gRPC engine's ids itself, so it must use the same setting, and when that setting keeps
// special tokens it must not show stop tokens either: the parsers remove the strings below
// from the text before parsing.
//
// Facts checked (vLLM main of 2026; tokenizer.json files under .cache/tokenizers/):
//   - hermes (vllm/tool_parsers/hermes_tool_parser.py adjust_request): when tools are given and
//     tool_choice is not "none", skip_special_tokens=False ("the tool_call tokens are marked
//     special in some models"). In Qwen3's tokenizer <tool_call> (151657), </tool_call> (151658),
//     <think> (151667) and </think> (151668) are added tokens with special=false, so they
//     survive either setting; <|im_end|> (151645) and <|endoftext|> (151643) are special.
//   - mistral (vllm/tool_parsers/mistral_tool_parser.py adjust_request): with a Hugging Face
//     tokenizer (chat template path), tools given and tool_choice not "none",
//     skip_special_tokens=False because [TOOL_CALLS] is a special token; with mistral_common
//     vLLM constrains the output with a grammar instead. No Mistral tokenizer is in .cache.
//   - glm45 / glm47 (vllm/tool_parsers/glm4_moe_tool_parser.py adjust_request): when tools are
//     given and tool_choice is not "none", skip_special_tokens=False (its <tool_call> tokens
//     are not special, it says, but transformers 5 may skip them). GLM's stop tokens
//     <|endoftext|>, <|user|> and <|observation|> are then stripped (no GLM tokenizer in .cache).
//   - kimi_k2 (vllm/tool_parsers/kimi_k2_tool_parser.py adjust_request): tools given and
//     tool_choice not "none": skip_special_tokens=False (its section and call markers are
//     special tokens); its end-of-turn <|im_end|> is stripped then.
//   - step3 (vllm/tool_parsers/step3_tool_parser.py adjust_request): tools given and tool_choice
//     not "none": skip_special_tokens=False (its block and call markers are special tokens, it
//     says). No Step3 tokenizer was at hand, so no stop token is stripped for it.
//   - deepseek_v32 (vllm/tool_parsers/deepseekv32_tool_parser.py adjust_request): tools given and
//     tool_choice not "none": skip_special_tokens=False (its DSML markers are not special
//     tokens, it says, but transformers 5 may skip them); <｜end▁of▁sentence｜> is stripped then.
//   - deepseek_v31: no adjust_request, so true (V3's tool markers are not special).
//   - llama3_json (vllm/tool_parsers/llama_tool_parser.py): no adjust_request, so true.
//     <|python_tag|> is a special token in Llama 3.1, so vLLM's parser normally sees the JSON
//     without it. The .cache "llama3_1" tokenizer has no <|python_tag|>: id 128010 there is
//     <|reserved_special_token_5|> (special), <|eot_id|> 128009 special.
//   - deepseek_v3 (vllm/tool_parsers/deepseekv3_tool_parser.py): no adjust_request, so true.
//     In DeepSeek V3's tokenizer the tool markers <｜tool▁calls▁begin｜> (128806) …
//     <｜tool▁sep｜> (128814) are added tokens with special=false (not special, whatever
//     wire/vllm-chat.md suggests), so they survive skipping; <｜end▁of▁sentence｜> (1) is special.
//   - qwen3 / deepseek_r1 reasoning (vllm/reasoning/qwen3_reasoning_parser.py,
//     deepseek_r1_reasoning_parser.py): no adjust_request; <think>/</think> are non-special
//     added tokens (Qwen3 verified above; the .cache deepseek_v3 tokenizer has no <think>, R1's
//     adds it as a non-special token looked up by vocab in the parser).
//   - openai_gptoss / openai (vllm/reasoning/gptoss_reasoning_parser.py,
//     vllm/tool_parsers/openai_tool_parser.py): vLLM parses token ids with openai_harmony, so
//     its text setting does not matter there; the gateway parses text, and in gpt-oss's
//     tokenizer <|channel|> (200005), <|message|> (200008), <|start|> (200006), <|end|>
//     (200007), <|call|> (200012), <|return|> (200002) and <|constrain|> (200003) are all
//     special: it must always decode with special tokens kept.

// SkipSpecialTokens reports the skip_special_tokens setting the gateway must decode this
// request's output with, as vLLM would (facts above).
func (p *Parsers) SkipSpecialTokens(req RequestInfo) bool {
	if p.harmony {
		return false
	}
	toolsOn := req.ToolsGiven && (req.ToolChoice != "none" || req.NamedTool != "")
	switch p.tool {
	case ToolHermes, ToolMistral, ToolGLM45, ToolGLM47, ToolKimiK2, ToolStep3, ToolDeepSeekV32:
		return !toolsOn
	}
	return true
}

// defaultStripTokens returns the stop tokens of the parsers' model family that vLLM's
// detokenizer would not show, for when the text is decoded with special tokens kept.
func defaultStripTokens(reasoning, tool string) []string {
	switch {
	case tool == ToolOpenAI || reasoning == ReasoningGptOss:
		return []string{"<|endoftext|>"}
	case tool == ToolHermes || tool == ToolQwen3Coder || tool == ToolQwen3XML || reasoning == ReasoningQwen3:
		return []string{"<|im_end|>", "<|endoftext|>"}
	case tool == ToolMistral:
		return []string{"</s>"}
	case tool == ToolGLM45 || tool == ToolGLM47 || reasoning == ReasoningGLM45 || reasoning == ReasoningGLM47:
		return []string{"<|endoftext|>", "<|user|>", "<|observation|>"}
	case tool == ToolLlama3JSON:
		return []string{"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"}
	case tool == ToolMiniMaxM2 || reasoning == ReasoningMiniMaxM2 || reasoning == ReasoningMiniMaxM2AppendThink:
		return []string{"[e~["}
	case tool == ToolSeedOSS || reasoning == ReasoningSeedOSS:
		return []string{"<seed:eos>"}
	case tool == ToolKimiK2 || reasoning == ReasoningKimiK2:
		return []string{"<|im_end|>"}
	case tool == ToolDeepSeekV3 || tool == ToolDeepSeekV31 || tool == ToolDeepSeekV32 || reasoning == ReasoningDeepSeekR1 || reasoning == ReasoningDeepSeekV3:
		return []string{"<｜end▁of▁sentence｜>"}
	}
	return nil
}

// stripStage removes special-token strings that the engine's own detokenizer would not have
// shown (end-of-turn and EOS tokens) from text decoded with special tokens kept.
type stripStage struct {
	tokens []string
	first  [256]bool
	buf    []byte
	out    []byte
}

func newStripStage(tokens []string) *stripStage {
	s := &stripStage{}
	for _, t := range tokens {
		if t != "" {
			s.tokens = append(s.tokens, t)
			s.first[t[0]] = true
		}
	}
	return s
}

func (s *stripStage) hasCandidate(text string) bool {
	for i := 0; i < len(text); i++ {
		if s.first[text[i]] {
			return true
		}
	}
	return false
}

// run returns text with the tokens removed; a trailing prefix of a token is held back.
func (s *stripStage) run(text string, eof bool) string {
	if len(s.buf) == 0 && !s.hasCandidate(text) {
		return text
	}
	s.buf = append(s.buf, text...)
	s.out = s.out[:0]
	b := s.buf
	i := 0
	for i < len(b) {
		if !s.first[b[i]] {
			s.out = append(s.out, b[i])
			i++
			continue
		}
		full, part := anyMarkerAt(b[i:], s.tokens)
		if full >= 0 {
			i += len(s.tokens[full])
			continue
		}
		if part && !eof {
			break
		}
		s.out = append(s.out, b[i])
		i++
	}
	n := copy(s.buf, b[i:])
	s.buf = s.buf[:n]
	return string(s.out)
}
