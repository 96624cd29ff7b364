package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"time"

	"github.com/kvgate/kvgate/pkg/openai"
)

// Untrusted templates (a request's chat_template, accepted only with
// --trust-request-chat-template) render in a child process, never in the gateway.
//
// Why a process: the library has no way to stop a render. A loop over a 64 MiB string, two
// nested loops over range(100000) or a quadratic string build run for minutes in a
// goroutine nobody can cancel, and a recursive macro overflows the goroutine stack, which
// is a fatal error in Go that no recover() catches and that ends the whole process. A child
// process can be killed on a deadline, its stack and heap can be capped, and its death
// costs one request. Operator templates (the model's, --chat-template) are trusted and
// render in process; their work is bounded by the request bounds (message count, nesting
// depth), range()'s sandbox limit and the prompt size bound.
//
// Each render runs one short-lived child (`gateway render-sandbox`): it reads one frame
// on stdin (the renderer's settings, the request body, the template), renders with the same
// code as the in-process path, writes one JSON answer on stdout and exits. The parent kills
// it at the deadline and reads at most the prompt bound plus a small margin of its output.

// DefaultSandboxTimeout and DefaultSandboxMemory apply when a Sandbox leaves them zero.
const (
	DefaultSandboxTimeout = 2 * time.Second
	DefaultSandboxMemory  = 512 << 20
	// sandboxMaxStack caps the child's goroutine stacks: a recursion that deep is a
	// runaway template, and the child dies instead of growing to Go's 1 GB default.
	sandboxMaxStack = 64 << 20
)

// Sandbox renders untrusted templates in child processes. Command is the argv of a program
// that calls ServeSandbox on its stdin and stdout and exits with its result (the gateway
// binary: `gateway render-sandbox`); Env is added to the child's environment. A Sandbox is
// safe for concurrent use; at most MaxConcurrent children run at once (0: 2), further
// renders wait.
type Sandbox struct {
	Command       []string
	Env           []string
	Timeout       time.Duration // per render (0: DefaultSandboxTimeout)
	MemoryLimit   int64         // bytes of heap the child may use (0: DefaultSandboxMemory)
	MaxConcurrent int

	once sync.Once
	sem  chan struct{}
}

// sandboxFrame is what the parent sends the child.
type sandboxFrame struct {
	Config   sandboxConfig `json:"config"`
	Body     string        `json:"body"`
	Template string        `json:"template"`
	Memory   int64         `json:"memory"`
}

// sandboxConfig is the part of a Renderer a render needs: everything but the templates
// and the tokenizer.
type sandboxConfig struct {
	Specials       []sandboxSpecial `json:"specials"`
	ContentFormat  string           `json:"content_format"`
	DefaultKwargs  json.RawMessage  `json:"default_kwargs,omitempty"`
	NoToolParser   bool             `json:"no_tool_parser"`
	MaxPromptBytes int              `json:"max_prompt_bytes"`
	Now            time.Time        `json:"now"`
	Multimodal     bool             `json:"multimodal,omitempty"`
	ModelType      string           `json:"model_type,omitempty"`
}

type sandboxSpecial struct {
	Name   string   `json:"name"`
	Value  string   `json:"value,omitempty"`
	List   []string `json:"list,omitempty"`
	IsList bool     `json:"is_list,omitempty"`
}

// sandboxAnswer is what the child sends back.
type sandboxAnswer struct {
	Prompt  *string `json:"prompt,omitempty"`
	Message string  `json:"message,omitempty"`
	Param   string  `json:"param,omitempty"`
}

func (r *Renderer) sandboxConfig() sandboxConfig {
	c := sandboxConfig{ContentFormat: r.opts.ContentFormat, DefaultKwargs: r.defaults, NoToolParser: r.opts.NoToolParser, MaxPromptBytes: r.maxPrompt, Now: r.now(),
		Multimodal: r.multimodal, ModelType: r.modelType}
	for _, s := range r.specials {
		c.Specials = append(c.Specials, sandboxSpecial{Name: s.name, Value: s.value, List: s.list, IsList: s.isList})
	}
	return c
}

// render renders req with the untrusted template src in a child process.
func (s *Sandbox) render(cfg sandboxConfig, req *openai.ChatRequest, src string) (string, *openai.Error) {
	s.once.Do(func() {
		n := s.MaxConcurrent
		if n <= 0 {
			n = 2
		}
		s.sem = make(chan struct{}, n)
	})
	timeout, mem := s.Timeout, s.MemoryLimit
	if timeout <= 0 {
		timeout = DefaultSandboxTimeout
	}
	if mem <= 0 {
		mem = DefaultSandboxMemory
	}
	frame, err := json.Marshal(sandboxFrame{Config: cfg, Body: string(req.AppendUpstream(nil, req.Model, nil)), Template: src, Memory: mem})
	if err != nil {
		return "", openai.BadRequest("", "chat template sandbox: "+err.Error())
	}
	s.sem <- struct{}{}
	defer func() { <-s.sem }()

	if len(s.Command) == 0 {
		return "", sandboxFailure("is not configured")
	}
	cmd := exec.Command(s.Command[0], s.Command[1:]...)
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Stdin = bytes.NewReader(frame)
	out := &limitedBuffer{limit: cfg.MaxPromptBytes + 64<<10}
	errOut := &limitedBuffer{limit: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Start(); err != nil {
		return "", sandboxFailure("could not start: " + err.Error())
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var werr error
	timedOut := false
	select {
	case werr = <-done:
	case <-timer.C:
		timedOut = true
		_ = cmd.Process.Kill()
		werr = <-done
	}
	switch {
	case timedOut:
		return "", openai.BadRequest("chat_template", fmt.Sprintf("chat template rendering took longer than %v and was stopped", timeout))
	case out.overflow:
		return "", openai.BadRequest("chat_template", fmt.Sprintf("the rendered prompt is more than the %d bytes allowed", cfg.MaxPromptBytes))
	case werr != nil:
		msg := errOut.String()
		switch {
		case strings.Contains(msg, "stack exceeds"):
			return "", openai.BadRequest("chat_template", "chat template rendering failed: recursion too deep")
		case strings.Contains(msg, sandboxMemoryMessage), strings.Contains(msg, "out of memory"):
			return "", openai.BadRequest("chat_template", fmt.Sprintf("chat template rendering used more than %d bytes of memory and was stopped", mem))
		}
		return "", sandboxFailure("failed: " + firstLine(msg))
	}
	var ans sandboxAnswer
	if err := json.Unmarshal(out.Bytes(), &ans); err != nil {
		return "", sandboxFailure("sent a malformed answer")
	}
	if ans.Prompt == nil {
		return "", openai.BadRequest(ans.Param, ans.Message)
	}
	return *ans.Prompt, nil
}

func sandboxFailure(what string) *openai.Error {
	return &openai.Error{Status: 500, Message: "chat template sandbox " + what, Type: openai.TypeServer}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// limitedBuffer keeps at most limit bytes and notes an overflow.
type limitedBuffer struct {
	bytes.Buffer
	limit    int
	overflow bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.Len(); len(p) > room {
		b.overflow = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

const sandboxMemoryMessage = "chat sandbox: memory limit exceeded"

// ServeSandbox is the child side of a Sandbox: it reads one frame from r, renders it and
// writes the answer to w, and returns the process exit status. It is meant to be the whole
// of a process (`gateway render-sandbox`): it caps the process's goroutine stacks and
// starts a heap watchdog that ends the process (exit status 3) when the render uses more
// memory than the frame allows.
func ServeSandbox(r io.Reader, w io.Writer) int {
	var f sandboxFrame
	if err := json.NewDecoder(io.LimitReader(r, 1<<30)).Decode(&f); err != nil {
		fmt.Fprintf(os.Stderr, "chat sandbox: read frame: %v\n", err)
		return 2
	}
	debug.SetMaxStack(sandboxMaxStack)
	if f.Memory > 0 {
		debug.SetMemoryLimit(f.Memory)
		go watchHeap(uint64(f.Memory))
	}
	ans := sandboxRender(&f)
	if err := json.NewEncoder(w).Encode(ans); err != nil {
		return 2
	}
	return 0
}

// watchHeap ends the process when the heap grows past limit; it runs for the life of the
// sandbox process, which lasts one render.
func watchHeap(limit uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 && sample[0].Value.Uint64() > limit {
			fmt.Fprintln(os.Stderr, sandboxMemoryMessage)
			os.Exit(3)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func sandboxRender(f *sandboxFrame) sandboxAnswer {
	fail := func(e *openai.Error) sandboxAnswer { return sandboxAnswer{Message: e.Message, Param: e.Param} }
	mf := &modelFiles{}
	for _, s := range f.Config.Specials {
		mf.specials = append(mf.specials, special{name: s.Name, value: s.Value, list: s.List, isList: s.IsList})
	}
	now := f.Config.Now
	mf.multimodal, mf.modelType = f.Config.Multimodal, f.Config.ModelType
	r, err := newRenderer(mf, Options{ContentFormat: f.Config.ContentFormat, DefaultTemplateKwargs: f.Config.DefaultKwargs,
		NoToolParser: f.Config.NoToolParser, MaxPromptBytes: f.Config.MaxPromptBytes, Now: func() time.Time { return now }})
	if err != nil {
		return sandboxAnswer{Message: err.Error()}
	}
	req, perr := openai.ParseChat([]byte(f.Body), openai.Limits{})
	if perr != nil {
		return fail(perr)
	}
	t, err := compileTemplate(f.Template)
	if err != nil {
		return sandboxAnswer{Message: err.Error(), Param: "chat_template"}
	}
	text, rerr := r.renderCompiled(req, t)
	if rerr != nil {
		return fail(rerr)
	}
	return sandboxAnswer{Prompt: &text}
}

var _ io.Writer = (*limitedBuffer)(nil)
