package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// session is one multi-turn chat conversation, sent to /v1/chat/completions. Turn k's
// messages are the shared system prompt, then every earlier user message followed by the
// answer the server actually streamed for it, then user message k; so each turn extends the
// previous turn's conversation, as a chat front end resends it.
type session struct {
	id    int
	at    time.Duration // start, simulated time
	first int           // global index of the first turn's result slot
	users []string      // one user message per turn
	tools []string      // responses: one tool result per turn, used when it follows a call
	// image is the data: URL of the picture of the first user turn (--chat-image-px; "" for
	// none), uuid its uuid ("" for none).
	image, uuid string
}

// errChatNeedsText: chat requests carry text messages, so token-id mode cannot send them.
var errChatNeedsText = errors.New("loadgen: --workload chat sends chat messages, which are text: give --tokenizer FILE|DIR instead of --token-ids (a model directory also renders the conversations for the ideal hit rate)")

// genChat builds ceil(numRequests / turns) sessions of up to `turns` turns (numRequests turns
// in total) over one shared system prompt of systemTokens tokens (none for 0); user messages
// are userTokens tokens; sessions start as an open loop at rate sessions per second. Lengths
// are those of the message texts; the chat template adds its own tokens around them.
func genChat(cfg genConfig, m promptMaker) (*plan, error) {
	if m.tb == nil {
		return nil, errChatNeedsText
	}
	if cfg.numRequests < 1 || cfg.turns < 1 || cfg.userTokens < 1 || cfg.systemTokens < 0 || cfg.outputTokens < 1 {
		return nil, fmt.Errorf("loadgen: chat needs requests ≥ 1, turns ≥ 1, user tokens ≥ 1, output tokens ≥ 1")
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 0x63686174)) // "chat"
	n := (cfg.numRequests + cfg.turns - 1) / cfg.turns
	at := arrivals(rng, n, cfg.rate, cfg.burstiness)
	p := &plan{system: m.make(rng, cfg.systemTokens), systemTokens: cfg.systemTokens,
		thinkTime: cfg.thinkTime, outputTokens: cfg.outputTokens}
	next := 0
	for s := range n {
		turns := min(cfg.turns, cfg.numRequests-next)
		sess := &session{id: s, at: at[s], first: next}
		if cfg.imagePx > 0 {
			var err error
			if sess.image, err = sessionImage(cfg.seed, s, cfg.imagePx); err != nil {
				return nil, err
			}
			if cfg.imageUUID {
				sess.uuid = sessionUUID(cfg.seed, s)
			}
		}
		for range turns {
			sess.users = append(sess.users, m.make(rng, cfg.userTokens).text)
		}
		next += turns
		p.sessions = append(p.sessions, sess)
	}
	p.describe = fmt.Sprintf("%s: %d sessions, %d requests, up to %d turns, %d-token system prompt, %d-token user turns, %d output tokens",
		workloadChat, n, cfg.numRequests, cfg.turns, cfg.systemTokens, cfg.userTokens, cfg.outputTokens)
	if cfg.imagePx > 0 {
		p.describe += fmt.Sprintf(", a %dx%d PNG in each session's first turn (uuid: %v)", cfg.imagePx, cfg.imagePx, cfg.imageUUID)
	}
	return p, nil
}

// chatMessage is one message of a chat request: Content is a string, or []contentPart for
// an image turn (chat_image.go).
type chatMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

// chatBody is the /v1/chat/completions request: streaming with usage, a fixed output length
// (max_tokens with ignore_eos, extra fields other servers ignore), greedy.
type chatBody struct {
	Model         string         `json:"model,omitempty"`
	Messages      []chatMessage  `json:"messages"`
	MaxTokens     int            `json:"max_tokens"`
	IgnoreEOS     bool           `json:"ignore_eos"`
	Temperature   float64        `json:"temperature"`
	Stream        bool           `json:"stream"`
	StreamOptions map[string]any `json:"stream_options,omitempty"`
}

func newChatBody(model string, msgs []chatMessage, maxTokens int) ([]byte, error) {
	return json.Marshal(chatBody{Model: model, Messages: msgs, MaxTokens: maxTokens, IgnoreEOS: true,
		Stream: true, StreamOptions: map[string]any{"include_usage": true}})
}

// chatIDs gives the token ids an engine computes for a chat request body: the body rendered
// with the model's chat template and tokenized as vLLM does (pkg/chat, the gateway's renderer).
type chatIDs struct {
	r *chat.Renderer
}

func (c *chatIDs) ids(body []byte) ([]uint32, error) {
	req, aerr := openai.ParseChat(body, openai.Limits{})
	if aerr != nil {
		return nil, aerr
	}
	res, aerr := c.r.Render(req)
	if aerr != nil {
		return nil, aerr
	}
	if len(res.Media) > 0 {
		// The engine's ids: media placeholders expanded where the family's count is known.
		return c.r.Expand(&res, nil).IDs, nil
	}
	return res.TokenIDs, nil
}

// loadChatIDs builds the renderer of --tokenizer when it is a model directory (its template),
// or of --chat-template (with the special tokens of the tokenizer file's directory); nil when
// neither gives a template, in which case chat's ideal hit rate is not reported.
func loadChatIDs(path, template string, t *tokenizer.Tokenizer) (*chatIDs, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("loadgen: tokenizer: %w", err)
	}
	dir := path
	if !st.IsDir() {
		if template == "" {
			return nil, nil
		}
		dir = filepath.Dir(path)
	}
	r, err := chat.New(dir, chat.Options{Tokenizer: t, ChatTemplate: template})
	if err != nil {
		return nil, fmt.Errorf("loadgen: chat template: %w", err)
	}
	// A directory without any template renders nothing: probe it once.
	probe, _ := newChatBody("", []chatMessage{{Role: "user", Content: "hi"}}, 1)
	c := &chatIDs{r: r}
	if _, err := c.ids(probe); err != nil {
		if template != "" {
			return nil, fmt.Errorf("loadgen: chat template: %w", err)
		}
		return nil, nil
	}
	return c, nil
}

// commonPrefix returns the length of the longest common prefix of a and b.
func commonPrefix(a, b []uint32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
