package parse

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// promptEndsReasoningSpec is PromptEndsReasoning's definition written plainly (the last end
// marker after the last start marker, in the text after the last GLM assistant marker), for
// TestPromptEndsReasoningSpec to hold the scanning version to.
func promptEndsReasoningSpec(prompt string) bool {
	if i := strings.LastIndex(prompt, glmAssistant); i >= 0 {
		prompt = prompt[i:]
	}
	for _, sp := range []*thinkSpec{&specThink, &specSeedOSS, &specMistralR} {
		end := strings.LastIndex(prompt, sp.end)
		if end >= 0 && end > strings.LastIndex(prompt, sp.start) {
			return true
		}
	}
	return false
}

func TestPromptEndsReasoningMarkers(t *testing.T) {
	want := [...]string{glmAssistant, specThink.start, specThink.end, specSeedOSS.start, specSeedOSS.end, specMistralR.start, specMistralR.end}
	if reasonMarkers != want {
		t.Fatalf("reasonMarkers %q, want the specs' markers %q", reasonMarkers, want)
	}
}

// TestPromptEndsReasoningSpec compares the scan with the definition on random prompts made of
// the markers, their fragments and text.
func TestPromptEndsReasoningSpec(t *testing.T) {
	frags := []string{"<think>", "</think>", "<seed:think>", "</seed:think>", "[THINK]", "[/THINK]", "<|assistant|>",
		"<", "[", "</", "<think", "[/THINK", "<|im_start|>assistant\n", "text ", "\n\n", "<seed:", "[[THINK]]", "<<think>>"}
	rng := rand.New(rand.NewPCG(7, 8))
	seen := map[bool]int{}
	for range 20000 {
		var sb strings.Builder
		for range rng.IntN(12) {
			sb.WriteString(frags[rng.IntN(len(frags))])
		}
		p := sb.String()
		got, want := PromptEndsReasoning(p), promptEndsReasoningSpec(p)
		if got != want {
			t.Fatalf("PromptEndsReasoning(%q) = %v, the definition says %v", p, got, want)
		}
		seen[got]++
	}
	if seen[true] < 1000 || seen[false] < 1000 {
		t.Fatalf("the random prompts hit too few of one answer: %v", seen)
	}
}

// BenchmarkPromptEndsReasoning: a 21-message Qwen3 prompt of about 15 KB with no reasoning
// markers, the common case (the whole prompt is scanned); spec is the LastIndex definition.
func BenchmarkPromptEndsReasoning(b *testing.B) {
	var sb strings.Builder
	for i := range 21 {
		sb.WriteString("<|im_start|>user\n")
		sb.WriteString(strings.Repeat("the train from paris to lyon leaves every hour ", 15))
		if i%2 == 1 {
			sb.WriteString("<|im_end|>\n<|im_start|>assistant\nok")
		}
		sb.WriteString("<|im_end|>\n")
	}
	sb.WriteString("<|im_start|>assistant\n")
	p := sb.String()
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			PromptEndsReasoning(p)
		}
	})
	b.Run("spec", func(b *testing.B) {
		for b.Loop() {
			promptEndsReasoningSpec(p)
		}
	})
}
