package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// maxTokenizeLine bounds one input line of `gateway tokenize`, so memory stays bounded whatever
// the input: a longer line is reported and skipped.
const maxTokenizeLine = 16 << 20

const tokenizeUsage = `usage: gateway tokenize --tokenizer PATH [--add-special-tokens] [--blocks N]

Reads one JSON string per line on stdin and prints, for each, the token ids the gateway routes
on as one JSON array per line on stdout. PATH is a tokenizer.json file or a model directory
holding one (tokenizer_config.json next to it is used when present).

  --add-special-tokens  add the special tokens engines add to /v1/completions text prompts
                        (default: raw encode, no special tokens added)
  --blocks N            print {"ids":[...],"blocks":[...]} with the block prefix hashes
                        (DESIGN.md §3, unsigned 64-bit decimal) of each full block of N tokens

A line that is not a JSON string, or is longer than 16 MiB, prints null, is reported on stderr,
and makes the exit status 1; the other lines are still processed.
`

// runTokenize is `gateway tokenize`: args are the arguments after "tokenize". It returns the
// process exit status: 0 on success, 1 when some line failed or output failed, 2 on bad usage or
// an unloadable tokenizer.
func runTokenize(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, tokenizeUsage) }
	path := fs.String("tokenizer", "", "tokenizer.json file or model directory")
	addSpecial := fs.Bool("add-special-tokens", false, "add special tokens as engines do for text prompts")
	blocks := fs.Int("blocks", 0, "also print block prefix hashes for this block size")
	if status, ok := parseArgs(fs, args, stderr); !ok {
		return status
	}
	if *path == "" {
		fmt.Fprint(stderr, "gateway tokenize: --tokenizer is required\n\n", tokenizeUsage)
		return 2
	}
	if *blocks < 0 {
		fmt.Fprintf(stderr, "gateway tokenize: --blocks must be positive, got %d\n", *blocks)
		return 2
	}
	tok, err := tokenizer.LoadPath(*path)
	if err != nil {
		fmt.Fprintf(stderr, "gateway tokenize: %v\n", err)
		return 2
	}
	t := &tokenizeLine{tok: tok, addSpecial: *addSpecial, blocks: *blocks, stderr: stderr}
	return eachLine("gateway tokenize", stdin, stdout, stderr, maxTokenizeLine, t.answer)
}

// tokenizeLine answers the lines of one `gateway tokenize` run, reusing its buffers.
type tokenizeLine struct {
	tok        *tokenizer.Tokenizer
	addSpecial bool
	blocks     int
	stderr     io.Writer
	lineNo     int
	ids        []uint32
	keys       []uint64
}

// answer appends line's ids (and block keys) to buf, or null after reporting why it cannot.
func (t *tokenizeLine) answer(buf, line []byte, tooLong bool) ([]byte, bool) {
	t.lineNo++
	fail := func(msg string) ([]byte, bool) {
		fmt.Fprintf(t.stderr, "gateway tokenize: line %d: %s\n", t.lineNo, msg)
		return append(buf, "null"...), true
	}
	var text *string
	switch {
	case tooLong:
		return fail(fmt.Sprintf("longer than %d bytes", maxTokenizeLine))
	case json.Unmarshal(line, &text) != nil || text == nil:
		return fail("not a JSON string")
	}
	var err error
	if t.ids, err = t.tok.Encode(t.ids[:0], *text, t.addSpecial); err != nil {
		return fail(err.Error())
	}
	if t.blocks == 0 {
		return openai.AppendTokenArray(buf, t.ids), false
	}
	buf = append(buf, `{"ids":`...)
	buf = openai.AppendTokenArray(buf, t.ids)
	t.keys = indexer.AppendBlockKeys(t.keys[:0], t.ids, t.blocks, "")
	buf = append(buf, `,"blocks":[`...)
	for i, k := range t.keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendUint(buf, k, 10)
	}
	return append(buf, "]}"...), false
}
