package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/kvgate/kvgate/pkg/indexer"
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
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gateway tokenize: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *path == "" {
		fmt.Fprint(stderr, "gateway tokenize: --tokenizer is required\n\n", tokenizeUsage)
		return 2
	}
	if *blocks < 0 {
		fmt.Fprintf(stderr, "gateway tokenize: --blocks must be positive, got %d\n", *blocks)
		return 2
	}
	tok, err := loadTokenizer(*path)
	if err != nil {
		fmt.Fprintf(stderr, "gateway tokenize: %v\n", err)
		return 2
	}

	in := bufio.NewReaderSize(stdin, 64<<10)
	out := bufio.NewWriterSize(stdout, 64<<10)
	var (
		line    []byte // the current line, at most maxTokenizeLine bytes
		ids     []uint32
		keys    []uint64
		buf     []byte
		text    *string
		failed  bool
		lineNo  int
		tooLong bool
	)
	fail := func(msg string) {
		failed = true
		fmt.Fprintf(stderr, "gateway tokenize: line %d: %s\n", lineNo, msg)
		buf = append(buf[:0], "null\n"...)
	}
	for {
		var readErr error
		line, tooLong, readErr = readLine(in, line, maxTokenizeLine)
		if len(line) == 0 && !tooLong {
			if readErr != nil && readErr != io.EOF {
				fmt.Fprintf(stderr, "gateway tokenize: read stdin: %v\n", readErr)
				failed = true
			}
			break
		}
		lineNo++
		text = nil
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case tooLong:
			fail(fmt.Sprintf("longer than %d bytes", maxTokenizeLine))
		case json.Unmarshal(line, &text) != nil || text == nil:
			fail("not a JSON string")
		default:
			ids, err = tok.Encode(ids[:0], *text, *addSpecial)
			if err != nil {
				fail(err.Error())
				break
			}
			buf = buf[:0]
			if *blocks > 0 {
				buf = append(buf, `{"ids":`...)
			}
			buf = appendUint32s(buf, ids)
			if *blocks > 0 {
				keys = indexer.AppendBlockKeys(keys[:0], ids, *blocks, "")
				buf = append(buf, `,"blocks":[`...)
				for i, k := range keys {
					if i > 0 {
						buf = append(buf, ',')
					}
					buf = strconv.AppendUint(buf, k, 10)
				}
				buf = append(buf, "]}"...)
			}
			buf = append(buf, '\n')
		}
		if _, err := out.Write(buf); err != nil {
			fmt.Fprintf(stderr, "gateway tokenize: write: %v\n", err)
			return 1
		}
		if cap(line) > 1<<20 { // do not pin a huge buffer after one long line
			line = nil
		}
		if readErr != nil {
			if readErr != io.EOF {
				fmt.Fprintf(stderr, "gateway tokenize: read stdin: %v\n", readErr)
				failed = true
			}
			break
		}
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintf(stderr, "gateway tokenize: write: %v\n", err)
		return 1
	}
	if failed {
		return 1
	}
	return 0
}

// loadTokenizer loads a tokenizer.json file, or the one in a model directory.
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if st.IsDir() {
		return tokenizer.LoadDir(path)
	}
	return tokenizer.LoadFile(path)
}

func appendUint32s(buf []byte, ids []uint32) []byte {
	buf = append(buf, '[')
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendUint(buf, uint64(id), 10)
	}
	return append(buf, ']')
}
