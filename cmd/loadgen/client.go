package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// newHTTPClient returns a client for many concurrent long-lived streams to a few hosts: keep
// enough idle connections per host that a burst does not re-dial (Go's default keeps 2), no
// compression (SSE chunks are tiny and must not be buffered), no overall timeout (each request
// carries its own context deadline). With apiKey set, requests to base's scheme and host carry
// it as a bearer token; requests elsewhere (the workers' /metrics) never do.
func newHTTPClient(streams int, base, apiKey string) (*http.Client, error) {
	t := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          max(streams, 100) * 2,
		MaxIdleConnsPerHost:   max(streams, 100),
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // TTFT can be long under saturation; the context bounds it
		DisableCompression:    true,
		WriteBufferSize:       64 << 10,
		ReadBufferSize:        64 << 10,
	}
	if apiKey == "" {
		return &http.Client{Transport: t}, nil
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("loadgen: --url %q is not a URL", base)
	}
	return &http.Client{Transport: &bearer{next: t, scheme: u.Scheme, host: u.Host, auth: "Bearer " + apiKey}}, nil
}

// bearer adds the Authorization header to requests for one scheme and host.
type bearer struct {
	next               http.RoundTripper
	scheme, host, auth string
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != b.scheme || r.URL.Host != b.host {
		return b.next.RoundTrip(r)
	}
	r = r.Clone(r.Context()) // a RoundTripper must not modify the request it is given
	r.Header.Set("Authorization", b.auth)
	return b.next.RoundTrip(r)
}

// CloseIdleConnections lets client.CloseIdleConnections reach the transport.
func (b *bearer) CloseIdleConnections() {
	if c, ok := b.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// completionBody is the /v1/completions request. ignore_eos and a fixed max_tokens make the
// output length exact on vLLM, SGLang and the simulator (extra fields are ignored elsewhere).
type completionBody struct {
	Model         string         `json:"model,omitempty"`
	Prompt        any            `json:"prompt"`
	MaxTokens     int            `json:"max_tokens"`
	IgnoreEOS     bool           `json:"ignore_eos"`
	Temperature   float64        `json:"temperature"`
	Stream        bool           `json:"stream"`
	StreamOptions map[string]any `json:"stream_options,omitempty"`
}

func newCompletionBody(model string, prompt any, maxTokens int) ([]byte, error) {
	return json.Marshal(completionBody{Model: model, Prompt: prompt, MaxTokens: maxTokens, IgnoreEOS: true,
		Stream: true, StreamOptions: map[string]any{"include_usage": true}})
}

// outcome is the measurement of one request, in real (unscaled) time.
type outcome struct {
	ok           bool
	err          string
	ttft, e2e    time.Duration
	end          time.Duration // completion time from the start of the run
	promptTokens int           // as reported by usage, else the generator's count
	outputTokens int
	cachedTokens int             // usage.prompt_tokens_details.cached_tokens when reported
	worker       string          // x-kvgate-worker response header
	text         string          // generated text (chat: the answer's content), kept for chat
	itl          []time.Duration // gaps between successive output chunks (itl.go)
}

// streamChunk is the part of an OpenAI completion or chat completion chunk the load generator
// reads.
type streamChunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta *struct {
			Content          string            `json:"content"`
			Reasoning        string            `json:"reasoning"`
			ReasoningContent string            `json:"reasoning_content"`
			ToolCalls        []json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

// completer sends streaming completion or chat completion requests.
type completer struct {
	client   *http.Client
	url      string // full endpoint URL
	model    string
	keepText bool
	// chat: the endpoint streams chat.completion.chunk deltas; TTFT is taken at the first
	// delta carrying output (content, reasoning or a tool call), not at the role chunk.
	chat bool
}

// do sends one streaming request body and measures it; start is the run's start for `end`.
// Failures are reported in the outcome (never as a Go error), classified briefly so that the
// report can group them.
func (c *completer) do(ctx context.Context, start time.Time, body []byte) (o outcome) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		o.err = "request: " + err.Error()
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	t0 := time.Now()
	defer func() {
		o.e2e = time.Since(t0)
		o.end = time.Since(start)
	}()
	resp, err := c.client.Do(req)
	if err != nil {
		o.err = "transport: " + shortErr(err)
		return o
	}
	defer resp.Body.Close()
	o.worker = resp.Header.Get("x-kvgate-worker")
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		o.err = fmt.Sprintf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
		return o
	}
	var text strings.Builder
	br := bufio.NewReaderSize(resp.Body, 32<<10)
	chunks := 0
	var gaps tokenGaps
	defer func() { o.itl = gaps.gaps }()
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// An over-long line: collect it whole.
			rest, err2 := br.ReadBytes('\n')
			line, err = append(append([]byte(nil), line...), rest...), err2
		}
		if len(line) > 0 {
			data, isData := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
			if isData {
				data = bytes.TrimSpace(data)
				if bytes.Equal(data, []byte("[DONE]")) {
					o.ok = true
					if o.outputTokens == 0 {
						o.outputTokens = chunks
					}
					if chunks == 0 {
						o.ttft = time.Since(t0) // no output chunk: the answer was empty
					}
					o.text = text.String()
					return o
				}
				var ch streamChunk
				if err := json.Unmarshal(data, &ch); err != nil {
					o.err = "bad chunk: " + err.Error()
					return o
				}
				if ch.Error != nil {
					o.err = "stream error: " + ch.Error.Message
					return o
				}
				if len(ch.Choices) > 0 && c.isOutput(&ch) {
					if chunks == 0 {
						o.ttft = time.Since(t0)
					}
					gaps.output(time.Now())
					chunks++
					if c.keepText {
						if d := ch.Choices[0].Delta; d != nil {
							text.WriteString(d.Content)
						} else {
							text.WriteString(ch.Choices[0].Text)
						}
					}
				}
				if u := ch.Usage; u != nil {
					o.promptTokens, o.outputTokens = u.PromptTokens, u.CompletionTokens
					if u.PromptTokensDetails != nil {
						o.cachedTokens = u.PromptTokensDetails.CachedTokens
					}
				}
			}
		}
		if err != nil {
			if err == io.EOF {
				o.err = "stream ended without [DONE]"
			} else {
				o.err = "read: " + shortErr(err)
			}
			return o
		}
	}
}

// isOutput reports whether a chunk with choices carries generated output: every completion
// chunk does; a chat chunk does when its delta has content, reasoning or tool calls (the
// role chunk and an empty last chunk do not).
func (c *completer) isOutput(ch *streamChunk) bool {
	if !c.chat {
		return true
	}
	d := ch.Choices[0].Delta
	return d != nil && (d.Content != "" || d.Reasoning != "" || d.ReasoningContent != "" || len(d.ToolCalls) > 0)
}

// shortErr drops the URL from *url.Error messages so that errors group in the report.
func shortErr(err error) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) && ue.Unwrap() != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return "timeout"
		}
		if errors.Is(err, context.Canceled) {
			return "canceled"
		}
		return ue.Unwrap().Error()
	}
	return err.Error()
}
