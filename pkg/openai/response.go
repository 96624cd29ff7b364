package openai

import (
	"encoding/hex"
	"math/rand/v2"
)

// Completion is a text_completion object: the non-streaming body of /v1/completions and, with
// one choice each, its SSE chunks.
type Completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
}

// ObjectTextCompletion is Completion.Object.
const ObjectTextCompletion = "text_completion"

// CompletionChoice is one choice of a Completion. FinishReason is null until the choice ends.
type CompletionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

// Usage counts a request's tokens. PromptTokensDetails carries cached_tokens where the engine
// reports it.
type Usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	PromptTokensDetails *TokenDetails `json:"prompt_tokens_details,omitempty"`
}

// TokenDetails is Usage.PromptTokensDetails.
type TokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// NewID returns prefix followed by 24 random hex digits, the shape of OpenAI's response ids
// ("cmpl-…", "chatcmpl-…").
func NewID(prefix string) string {
	var b [12]byte
	for i := 0; i < len(b); i += 8 {
		x := rand.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(x >> (8 * j))
		}
	}
	return prefix + hex.EncodeToString(b[:])
}
