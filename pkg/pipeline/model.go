package pipeline

import (
	"fmt"

	"github.com/kvgate/kvgate/pkg/admission"
	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// Model is one served model (Config.Models, or a `models:` entry of the gateway's config
// file): its requests are tokenized, rendered, scored and picked with its own fields, among
// its own workers.
type Model struct {
	// Name is the served model name clients ask for, and the spec model= of its workers.
	// Required and unique, except for the default model (Config.Models).
	Name string
	// Tokenizer turns text prompts into the token ids the gateway routes on (and sends to
	// grpc:// workers), and decodes grpc:// workers' output. nil: text prompts are proxied
	// untokenized to http:// workers and routed without prefix information; grpc:// workers
	// then accept token-id prompts only.
	Tokenizer Tokenizer
	// Chat renders chat requests into the token ids the engine computes (nil: chat requests
	// are routed without prefix information, and only http:// workers can serve them).
	Chat ChatRenderer
	// ChatParsers splits reasoning and tool calls out of grpc:// workers' chat output as the
	// engine's own server would (nil: all text is content).
	ChatParsers *parse.Parsers
	// ReasoningField is where that reasoning goes (engine.Reasoning*; "" writes both fields).
	ReasoningField string
	// Policy picks among the model's workers. Required.
	Policy policy.Policy
	// BlockSize is the block size for workers whose spec and events do not give one
	// (0: fleet.DefaultBlockSize); Tree, when set, must use it.
	BlockSize int
	// Index is the model's exact event index (required); Tree the approximate tree and
	// Pending the pending overlay (both optional: nil disables them).
	Index   *indexer.Index
	Tree    *indexer.Tree
	Pending *indexer.Pending
	// PD configures prefill/decode disaggregation, in effect when the pool has role=prefill
	// workers (pd.go).
	PD PD
}

// Served is the pipeline's own state of a served model, kept in its fleet pool (Pool.Routing):
// what endpoints render and tokenize with (its exported fields) and how it is routed.
type Served struct {
	Tok            Tokenizer
	Chat           ChatRenderer
	Parsers        *parse.Parsers
	ReasoningField string
	policy         policy.Policy
	pd             pdState
	// queue is the pool's admission queue (admission.go; nil: none configured).
	queue *admission.Queue[*fleet.Member]
}

// modelOf returns the pipeline's state of the model a pool serves.
func modelOf(p *fleet.Pool) *Served { return p.Routing().(*Served) }

// ChatRenderer renders a chat request into the prompt and token ids the engine computes for it
// (pkg/chat, wire/vllm-chat.md); *chat.Renderer implements it.
type ChatRenderer interface {
	Render(req *openai.ChatRequest) (chat.Result, *openai.Error)
}

// RendererWrapper is a ChatRenderer that wraps another to add something of its own (an
// endpoint's per-model settings, say). The pipeline looks through it for the optional
// abilities of the renderer underneath (media expansion), which a wrapper would otherwise
// hide.
type RendererWrapper interface {
	ChatRenderer
	Unwrap() ChatRenderer
}

// Tokenizer is what the pipeline needs of a tokenizer: encoding prompts it routes on (and sends
// to grpc:// workers), the vocabulary size that bounds token-id prompts, and incremental
// decoders for gRPC output. FromTokenizer adapts *tokenizer.Tokenizer.
type Tokenizer interface {
	// Encode appends the ids of text to dst; addSpecial adds the BOS/template tokens as the
	// engines do for /v1/completions.
	Encode(dst []uint32, text string, addSpecial bool) ([]uint32, error)
	// VocabSize returns the number of token ids (ids ≥ it are invalid).
	VocabSize() int
	// NewDecoder returns a fresh incremental decoder, used by one goroutine.
	engine.Detokenizer
}

// FromTokenizer adapts a loaded HF tokenizer to the pipeline's Tokenizer.
func FromTokenizer(t *tokenizer.Tokenizer) Tokenizer { return hfTokenizer{t} }

type hfTokenizer struct{ t *tokenizer.Tokenizer }

func (h hfTokenizer) Encode(dst []uint32, text string, addSpecial bool) ([]uint32, error) {
	return h.t.Encode(dst, text, addSpecial)
}

func (h hfTokenizer) VocabSize() int { return h.t.VocabSize() }

func (h hfTokenizer) NewDecoder(skipSpecial bool) engine.StreamDecoder {
	return h.t.NewStreamDecoderSpecial(skipSpecial)
}

var (
	_ Tokenizer            = hfTokenizer{}
	_ engine.StreamDecoder = (*tokenizer.StreamDecoder)(nil)
)

// policyName is the name a policy reports (the policies policy.New builds are fmt.Stringers).
func policyName(p policy.Policy) string {
	if s, ok := p.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", p)
}

// Token returns the vocabulary string of id (/tokenize's return_token_strs).
func (h hfTokenizer) Token(id uint32) (string, bool) { return h.t.Token(id) }
