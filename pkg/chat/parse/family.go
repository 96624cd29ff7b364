package parse

import "strings"

// DefaultParserNames picks vLLM's recommended parser names from model family hints: a model
// name or path ("Qwen/Qwen3-8B", "deepseek-ai/DeepSeek-R1") or a config.json model_type
// ("qwen3", "gpt_oss"). The first hint naming a known family decides, so a specific name
// ("Qwen3-Coder-30B", plain content) wins over a generic model_type ("qwen3_moe") given after it.
// The pairs are the ones vLLM's recipes start each family with. Unknown families, and formats
// this package does not parse, give "" for that side (plain content).
func DefaultParserNames(hints ...string) (reasoning, tool string) {
	for _, h := range hints {
		if r, t, ok := familyParsers(h); ok {
			return r, t
		}
	}
	return "", ""
}

// familyParsers is DefaultParserNames for one hint; ok reports a known family.
func familyParsers(family string) (reasoning, tool string, ok bool) {
	f := strings.ToLower(family)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(f, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("gpt-oss", "gpt_oss", "gptoss"):
		return ReasoningGptOss, ToolOpenAI, true
	case has("deepseek-v4", "deepseek_v4"):
		return "", "", true
	case has("deepseek-v3.2", "deepseek_v32"):
		return ReasoningDeepSeekV3, ToolDeepSeekV32, true
	case has("deepseek-v3.1", "deepseek_v31"):
		return ReasoningDeepSeekV3, ToolDeepSeekV31, true
	case has("deepseek-r1", "deepseek_r1"):
		return ReasoningDeepSeekR1, ToolDeepSeekV3, true
	case has("deepseek-v3", "deepseek_v3"):
		return "", ToolDeepSeekV3, true
	case has("qwen3-coder", "qwen3_coder", "qwen3coder"):
		return "", ToolQwen3Coder, true
	case has("qwen3.5", "qwen3_5", "qwen3.6", "qwen3_6"):
		return ReasoningQwen3, ToolQwen3Coder, true
	case has("qwen3", "qwq"):
		return ReasoningQwen3, ToolHermes, true
	case has("llama-4", "llama4", "llama_4"):
		return "", ToolLlama4Pythonic, true
	case has("llama-3", "llama3", "llama_3"):
		return "", ToolLlama3JSON, true
	case has("glm-4.7", "glm4.7", "glm-5", "glm5"):
		return ReasoningGLM47, ToolGLM47, true
	case has("glm-4.5", "glm-4.6", "glm4.5", "glm4.6", "glm4_moe"):
		return ReasoningGLM45, ToolGLM45, true
	case has("kimi-k2-thinking", "kimi_k2_thinking"):
		return ReasoningKimiK2, ToolKimiK2, true
	case has("kimi-k2", "kimi_k2"):
		return "", ToolKimiK2, true
	case has("minimax-m2", "minimax_m2"):
		return ReasoningMiniMaxM2AppendThink, ToolMiniMaxM2, true
	case has("seed-oss", "seed_oss"):
		return ReasoningSeedOSS, ToolSeedOSS, true
	case has("step3", "step-3"):
		return ReasoningStep3, ToolStep3, true
	case has("granite-4", "granite4", "granitemoehybrid"):
		return "", ToolHermes, true // Granite 4 writes Hermes <tool_call> JSON
	case has("granite-3.2", "granite-3.3", "granite3.2", "granite3.3"):
		return ReasoningGranite, ToolGranite, true // reasoning only when the output opens with its marker
	case has("granite"):
		return "", ToolGranite, true
	case has("magistral"):
		return ReasoningMistral, ToolMistral, true
	case has("mistral", "mixtral", "ministral", "magistral", "devstral", "codestral"):
		return "", ToolMistral, true
	}
	return "", "", false
}
