package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// chatOptions configure chat rendering and output parsing with the names of the `vllm serve`
// flags, so a gateway in front of vLLM is started with the flags its engines were: the prompt
// it routes on is then the engine's, and grpc:// workers' output is split as vLLM would.
type chatOptions struct {
	ChatTemplate              string     `yaml:"chat_template"`
	ChatTemplateContentFormat string     `yaml:"chat_template_content_format"`
	DefaultChatTemplateKwargs jsonObject `yaml:"default_chat_template_kwargs"`
	TrustRequestChatTemplate  bool       `yaml:"trust_request_chat_template"`
	ReasoningParser           string     `yaml:"reasoning_parser"`
	ToolCallParser            string     `yaml:"tool_call_parser"`
	ToolCallRawArguments      bool       `yaml:"tool_call_raw_arguments"`
	ReasoningField            string     `yaml:"reasoning_field"`
	// Multimodal is auto (the model directory says), on or off; LimitMMPerPrompt and
	// MaxMediaBytes bound a request's media (chat.Options).
	Multimodal       string     `yaml:"multimodal"`
	LimitMMPerPrompt jsonObject `yaml:"limit_mm_per_prompt"`
	MaxMediaBytes    int        `yaml:"max_media_bytes"`
}

// Parser flag values besides vLLM's parser names.
const (
	parserAuto = "auto" // pick from the model family (parse.DefaultParserNames)
	parserNone = "none" // as a server started without the flag
)

func defaultChatOptions() chatOptions {
	return chatOptions{ChatTemplateContentFormat: "auto", ReasoningParser: parserAuto, ToolCallParser: parserAuto, ReasoningField: engine.ReasoningBoth,
		Multimodal: chat.MultimodalAuto, MaxMediaBytes: chat.DefaultMaxMediaBytes}
}

func (c *chatOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ChatTemplate, "chat-template", c.ChatTemplate, "chat template `FILE` (or the template text) used instead of the model directory's, as vLLM's --chat-template")
	fs.StringVar(&c.ChatTemplateContentFormat, "chat-template-content-format", c.ChatTemplateContentFormat, "message content passed to the template: auto (detected from the template), string or openai")
	fs.Var(&c.DefaultChatTemplateKwargs, "default-chat-template-kwargs", "JSON object of chat template kwargs every request gets (a request's chat_template_kwargs override them)")
	fs.BoolVar(&c.TrustRequestChatTemplate, "trust-request-chat-template", c.TrustRequestChatTemplate, "accept a request's chat_template (rendered in a sandboxed child process); otherwise such requests get 400, as vLLM")
	fs.StringVar(&c.ReasoningParser, "reasoning-parser", c.ReasoningParser, "split reasoning out of grpc:// workers' chat output: auto (from the model family), none, or a vLLM name: "+strings.Join(parse.ReasoningParserNames(), ", "))
	fs.StringVar(&c.ToolCallParser, "tool-call-parser", c.ToolCallParser, "parse tool calls out of grpc:// workers' chat output: auto (from the model family), none (tool_choice other than none is then refused), or a vLLM name: "+strings.Join(parse.ToolParserNames(), ", "))
	fs.BoolVar(&c.ToolCallRawArguments, "tool-call-raw-arguments", c.ToolCallRawArguments, "send grpc:// workers' JSON tool-call arguments verbatim, as the model wrote them (as vLLM's streaming path does), instead of re-formatted as vLLM's non-streaming json.dumps; streamed and whole responses alike")
	fs.StringVar(&c.Multimodal, "multimodal", c.Multimodal, "accept image, audio and video content parts: auto (when the model directory's config.json has a vision or audio tower, or a preprocessor_config.json exists), on or off")
	fs.Var(&c.LimitMMPerPrompt, "limit-mm-per-prompt", "JSON object of the media items one request may carry per modality, as vLLM's flag, e.g. '{\"image\": 4, \"video\": 1}' (default 999 each)")
	fs.IntVar(&c.MaxMediaBytes, "max-media-bytes", c.MaxMediaBytes, "largest decoded size of one data: URL in a request (larger: 413); the gateway never fetches http(s) URLs")
	fs.StringVar(&c.ReasoningField, "reasoning-field", c.ReasoningField, "where grpc:// workers' parsed reasoning goes: both (reasoning and reasoning_content), reasoning (current vLLM) or reasoning_content (SGLang, older vLLM)")
}

func (c *chatOptions) validate() error {
	if !slices.Contains(engine.ReasoningFields(), c.ReasoningField) {
		return fmt.Errorf("gateway: --reasoning-field %q is not one of %s", c.ReasoningField, strings.Join(engine.ReasoningFields(), ", "))
	}
	switch c.Multimodal {
	case "", chat.MultimodalAuto, chat.MultimodalOn, chat.MultimodalOff:
	default:
		return fmt.Errorf("gateway: --multimodal %q is not auto, on or off", c.Multimodal)
	}
	if _, err := chat.ParseMediaLimits(string(c.LimitMMPerPrompt)); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if c.MaxMediaBytes < 0 {
		return errors.New("gateway: --max-media-bytes must not be negative")
	}
	return nil
}

// chatSetup is what the router needs for chat: the renderer (nil without a model directory)
// and the parsers of grpc:// workers' output (nil: content only).
type chatSetup struct {
	renderer *chat.Renderer
	parsers  *parse.Parsers
}

// buildChat builds the renderer for the model directory dir (which tok was loaded from) and
// the output parsers. "auto" parsers come from the model's name, then its config.json
// model_type; a family chat cannot parse gets none, and is logged.
func buildChat(dir, model string, tok *tokenizer.Tokenizer, c chatOptions, log *zap.Logger) (chatSetup, error) {
	var cs chatSetup
	opts := chat.Options{
		ChatTemplate:             c.ChatTemplate,
		ContentFormat:            c.ChatTemplateContentFormat,
		DefaultTemplateKwargs:    json.RawMessage(c.DefaultChatTemplateKwargs),
		TrustRequestChatTemplate: c.TrustRequestChatTemplate,
		NoToolParser:             c.ToolCallParser == parserNone,
		Tokenizer:                tok,
		Multimodal:               c.Multimodal,
		MaxMediaBytes:            c.MaxMediaBytes,
	}
	var err error
	if opts.MediaLimits, err = chat.ParseMediaLimits(string(c.LimitMMPerPrompt)); err != nil {
		return cs, fmt.Errorf("gateway: %w", err)
	}
	if c.TrustRequestChatTemplate {
		exe, err := os.Executable()
		if err != nil {
			return cs, fmt.Errorf("gateway: --trust-request-chat-template: %w", err)
		}
		opts.Sandbox = &chat.Sandbox{Command: []string{exe, renderSandboxCommand}}
	}
	var family []string
	if dir != "" {
		r, err := chat.New(dir, opts)
		if err != nil {
			return cs, fmt.Errorf("gateway: chat: %w", err)
		}
		cs.renderer = r
		family = []string{filepath.Base(filepath.Clean(dir)), model, r.ModelType()}
	} else {
		family = []string{model}
	}
	reasoning, tool := resolveParser(c.ReasoningParser), resolveParser(c.ToolCallParser)
	if c.ReasoningParser == parserAuto || c.ToolCallParser == parserAuto {
		ar, at := parse.DefaultParserNames(family...)
		if c.ReasoningParser == parserAuto {
			reasoning = ar
		}
		if c.ToolCallParser == parserAuto {
			tool = at
		}
	}
	var popts []parse.Option
	if c.ToolCallRawArguments {
		popts = append(popts, parse.WithRawArguments())
	}
	p, err := parse.NewParsers(reasoning, tool, popts...)
	if err != nil {
		return cs, fmt.Errorf("gateway: --reasoning-parser/--tool-call-parser: %w", err)
	}
	if reasoning != "" || tool != "" {
		cs.parsers = p
	}
	log.Info("chat", zap.Bool("renderer", cs.renderer != nil), zap.Bool("multimodal", cs.renderer != nil && cs.renderer.Multimodal()), zap.String("reasoning_parser", reasoning), zap.String("tool_call_parser", tool),
		zap.Bool("tool_call_raw_arguments", c.ToolCallRawArguments))
	return cs, nil
}

// resolveParser maps a parser flag to a parser name ("" for none; auto is resolved later).
func resolveParser(v string) string {
	if v == parserNone || v == parserAuto {
		return ""
	}
	return v
}

// jsonObject is a JSON object option: a flag takes its text; the YAML file takes a mapping
// (converted to JSON) or a string holding the JSON.
type jsonObject json.RawMessage

func (j *jsonObject) String() string { return string(*j) }

func (j *jsonObject) Set(s string) error {
	s = strings.TrimSpace(s)
	if s == "" {
		*j = nil
		return nil
	}
	if !strings.HasPrefix(s, "{") || !json.Valid([]byte(s)) {
		return errors.New("not a JSON object")
	}
	*j = jsonObject(s)
	return nil
}

func (j *jsonObject) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return j.Set(n.Value)
	}
	if n.Kind != yaml.MappingNode {
		return errors.New("default_chat_template_kwargs: want a mapping or a JSON object string")
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("default_chat_template_kwargs: %w", err)
	}
	*j = b
	return nil
}
