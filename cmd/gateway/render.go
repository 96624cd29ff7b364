package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/openai"
)

// maxRenderLine bounds one input line of `gateway render`, as for `gateway tokenize`.
const maxRenderLine = 16 << 20

// renderSandboxCommand is the hidden subcommand a chat.Sandbox runs: the gateway binary
// renders an untrusted request template in a child of itself.
const renderSandboxCommand = "render-sandbox"

const renderUsage = `usage: gateway render --model-path DIR [flags]

Reads one chat completion request body (JSON) per line on stdin and prints, for each, what the
gateway routes on: {"prompt": TEXT, "token_ids": [...]}, or {"error": {...}} (the OpenAI error
body) for a request the engine would reject. DIR is a model directory (tokenizer.json,
tokenizer_config.json, optional chat_template.jinja and config.json). The defaults model
` + "`vllm serve DIR --enable-auto-tool-choice --tool-call-parser X`" + `:

  --chat-template FILE                 the template to use instead of the model's (a file, or
                                       the template text itself)
  --chat-template-content-format F     auto (default), string or openai
  --default-chat-template-kwargs JSON  kwargs passed to every render (a JSON object)
  --trust-request-chat-template        accept a request's chat_template (rendered in a
                                       sandboxed child process)
  --no-tool-call-parser                as a server without --tool-call-parser: tool_choice
                                       other than "none" is rejected
  --model-type T                       override config.json's model_type (gpt_oss: Harmony)
  --multimodal auto|on|off             accept image, audio and video parts (auto: when the
                                       model directory has a vision or audio tower, or a
                                       preprocessor config)
  --limit-mm-per-prompt JSON           media items per modality, e.g. {"image": 4}
  --max-media-bytes N                  largest decoded data: URL (default 20 MiB)

A request with media also prints "exact_tokens" (how many leading ids are the engine's: those
before the first media placeholder, which the engine expands), "media" (each item's modality,
placeholder index, a data: image's size and the tokens the engine's processor puts in place of its
placeholder where the family's rule is known (Qwen2/2.5/3-VL, Gemma 3), uuid and the gateway's
routing hash) and a "note" on why exactness stops.

A line that is not JSON, or is longer than 16 MiB, prints an error object like any rejected
request. The exit status is 0 when every line was answered, 1 on an input or output failure,
2 on bad usage or an unloadable model.
`

// runRender is `gateway render`: args are the arguments after "render".
func runRender(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, renderUsage) }
	dir := fs.String("model-path", "", "model directory")
	var opts chat.Options
	fs.StringVar(&opts.ChatTemplate, "chat-template", "", "chat template file or text")
	fs.StringVar(&opts.ContentFormat, "chat-template-content-format", "auto", "auto, string or openai")
	kwargs := fs.String("default-chat-template-kwargs", "", "JSON object of default template kwargs")
	fs.BoolVar(&opts.TrustRequestChatTemplate, "trust-request-chat-template", false, "accept request chat templates")
	fs.BoolVar(&opts.NoToolParser, "no-tool-call-parser", false, "reject tool_choice other than none")
	fs.StringVar(&opts.ModelType, "model-type", "", "override config.json's model_type")
	fs.StringVar(&opts.Multimodal, "multimodal", chat.MultimodalAuto, "accept media parts: auto, on or off")
	limits := fs.String("limit-mm-per-prompt", "", "JSON object of media items per modality")
	fs.IntVar(&opts.MaxMediaBytes, "max-media-bytes", chat.DefaultMaxMediaBytes, "largest decoded data: URL")
	if status, ok := parseArgs(fs, args, stderr); !ok {
		return status
	}
	if *dir == "" {
		fmt.Fprint(stderr, "gateway render: --model-path is required\n\n", renderUsage)
		return 2
	}
	if *kwargs != "" {
		opts.DefaultTemplateKwargs = json.RawMessage(*kwargs)
	}
	var err error
	if opts.MediaLimits, err = chat.ParseMediaLimits(*limits); err != nil {
		fmt.Fprintf(stderr, "gateway render: %v\n", err)
		return 2
	}
	if opts.TrustRequestChatTemplate {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "gateway render: %v\n", err)
			return 2
		}
		opts.Sandbox = &chat.Sandbox{Command: []string{exe, renderSandboxCommand}}
	}
	r, err := chat.New(*dir, opts)
	if err != nil {
		fmt.Fprintf(stderr, "gateway render: %v\n", err)
		return 2
	}

	return eachLine("gateway render", stdin, stdout, stderr, maxRenderLine, func(buf, line []byte, tooLong bool) ([]byte, bool) {
		if tooLong {
			return openai.BadRequest("", fmt.Sprintf("line longer than %d bytes", maxRenderLine)).AppendBody(buf), false
		}
		return appendRendered(buf, r, line), false
	})
}

// appendRendered appends the answer for one request body.
func appendRendered(buf []byte, r *chat.Renderer, body []byte) []byte {
	req, perr := openai.ParseChat(body, openai.Limits{})
	if perr != nil {
		return perr.AppendBody(buf)
	}
	res, rerr := r.Render(req)
	if rerr != nil {
		return rerr.AppendBody(buf)
	}
	buf = append(buf, `{"prompt":`...)
	buf = openai.AppendString(buf, res.Prompt)
	buf = append(buf, `,"token_ids":`...)
	ids := res.TokenIDs
	var e chat.Expanded
	if len(res.Media) > 0 {
		// The ids the engine computes: placeholders expanded where the family's count is known.
		e = r.Expand(&res, chat.UUIDIdentity)
		ids = e.IDs
	}
	if ids == nil {
		ids = []uint32{}
	}
	buf = openai.AppendTokenArray(buf, ids)
	if len(res.Media) > 0 {
		buf = appendMedia(buf, &res, &e)
	}
	return append(buf, '}')
}

// appendMedia appends what a request with media is routed on: how many leading ids (of the
// expanded ids printed) are the engine's with their blocks' keys, each item's place and count
// there, its routing hash, and why exactness stops where it does (docs/multimodal.md).
func appendMedia(buf []byte, res *chat.Result, e *chat.Expanded) []byte {
	buf = append(buf, `,"exact_tokens":`...)
	buf = strconv.AppendInt(buf, int64(e.Exact), 10)
	buf = append(buf, `,"media":[`...)
	for i, it := range res.Media {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"modality":`...)
		buf = openai.AppendString(buf, it.Modality)
		if e.Spans != nil {
			sp := e.Spans[i]
			buf = append(buf, `,"placeholder_at":`...)
			buf = strconv.AppendInt(buf, int64(sp.Offset), 10)
			buf = append(buf, `,"placeholder_length":`...)
			buf = strconv.AppendInt(buf, int64(sp.Length), 10)
			buf = append(buf, `,"expanded":`...)
			buf = strconv.AppendBool(buf, sp.Expanded)
		}
		if it.Width > 0 {
			buf = append(buf, `,"width":`...)
			buf = strconv.AppendInt(buf, int64(it.Width), 10)
			buf = append(buf, `,"height":`...)
			buf = strconv.AppendInt(buf, int64(it.Height), 10)
		}
		if it.Tokens > 0 {
			buf = append(buf, `,"placeholder_tokens":`...)
			buf = strconv.AppendInt(buf, int64(it.Tokens), 10)
		}
		if it.HasUUID {
			buf = append(buf, `,"uuid":`...)
			buf = openai.AppendString(buf, it.UUID)
		}
		buf = append(buf, `,"hash":"`...)
		buf = strconv.AppendUint(buf, it.Hash, 16)
		buf = append(buf, `"}`...)
	}
	buf = append(buf, `],"note":`...)
	var note string
	switch {
	case res.Unrendered != "":
		note = res.Unrendered
	case e.Stop == "":
		note = "every id is the engine's: placeholders expanded by the model family's rule, each item's blocks keyed by its uuid as the engine keys them"
	default:
		note = "the ids before exact_tokens are the engine's, with their blocks' keys; exactness stops there: " + e.Stop
	}
	return openai.AppendString(buf, note)
}
