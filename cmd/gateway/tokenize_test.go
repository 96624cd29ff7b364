package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// qwen3Dir is the real Qwen3 tokenizer fetched by `make testdata`; tests fail when it is missing.
func qwen3Dir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", ".cache", "tokenizers", "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatalf("Qwen3 tokenizer missing (%v): run `make testdata`", err)
	}
	return dir
}

func runTok(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runTokenize(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestTokenizeLines(t *testing.T) {
	dir := qwen3Dir(t)
	tk, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"Hello, world!", "", "<|im_start|>user\n你好<|im_end|>", strings.Repeat("tokens ", 40)}
	var in strings.Builder
	for _, s := range texts {
		b, _ := json.Marshal(s)
		in.Write(b)
		in.WriteString("\r\n") // CRLF line ends are accepted
	}
	for _, tt := range []struct {
		name    string
		args    []string
		special bool
	}{
		{"raw from dir", []string{"--tokenizer", dir}, false},
		{"special from file", []string{"--tokenizer", filepath.Join(dir, "tokenizer.json"), "--add-special-tokens"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runTok(t, in.String(), tt.args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != len(texts) {
				t.Fatalf("got %d output lines, want %d: %q", len(lines), len(texts), out)
			}
			for i, s := range texts {
				want, err := tk.Encode(nil, s, tt.special)
				if err != nil {
					t.Fatal(err)
				}
				if want == nil {
					want = []uint32{}
				}
				var got []uint32
				if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
					t.Fatalf("line %d %q: %v", i, lines[i], err)
				}
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("line %d (-want +got):\n%s", i, d)
				}
			}
		})
	}
	// A known answer, independent of Encode: from the reference golden file.
	code, out, _ := runTok(t, `"Hello world's 12345 ſ 'ſ"`+"\n", "--tokenizer", dir)
	if want := "[9707,1879,594,220,16,17,18,19,20,25917,123,364,144815]\n"; code != 0 || out != want {
		t.Errorf("got %d %q, want 0 %q", code, out, want)
	}
}

func TestTokenizeBlocks(t *testing.T) {
	dir := qwen3Dir(t)
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 10)
	b, _ := json.Marshal(text)
	code, out, errs := runTok(t, string(b)+"\n", "--tokenizer", dir, "--blocks", "16")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		IDs    []uint32 `json:"ids"`
		Blocks []uint64 `json:"blocks"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if len(got.IDs) < 32 {
		t.Fatalf("only %d ids", len(got.IDs))
	}
	if want := len(got.IDs) / 16; len(got.Blocks) != want {
		t.Fatalf("got %d blocks, want %d", len(got.Blocks), want)
	}
	if d := cmp.Diff(indexer.AppendBlockKeys(nil, got.IDs, 16, ""), got.Blocks); d != "" {
		t.Errorf("blocks (-want +got):\n%s", d)
	}
	if want := indexer.ContentHash(got.IDs[:16]); got.Blocks[0] != want {
		t.Errorf("block 0 = %d, want content hash %d", got.Blocks[0], want)
	}
}

func TestTokenizeBadLines(t *testing.T) {
	dir := qwen3Dir(t)
	long := `"` + strings.Repeat("a", maxTokenizeLine) + `"`
	in := strings.Join([]string{`"ok"`, `not json`, `null`, `123`, ``, long, `"\ud800x"`, `"after"`}, "\n") + "\n"
	code, out, errs := runTok(t, in, "--tokenizer", dir)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	// A lone surrogate escape decodes to U+FFFD (Go's JSON decoder; Python would keep the
	// surrogate and the engine's tokenizer would reject it).
	fffd, _ := json.Marshal("\ufffdx")
	code2, want2, _ := runTok(t, string(fffd)+"\n", "--tokenizer", dir)
	if code2 != 0 {
		t.Fatalf("exit %d", code2)
	}
	want := "[562]\nnull\nnull\nnull\nnull\nnull\n" + want2 + "[10694]\n"
	if out != want {
		t.Errorf("stdout = %q, want %q", out, want)
	}
	for _, msg := range []string{"line 2: not a JSON string", "line 3: not a JSON string", "line 5: not a JSON string", "line 6: longer than"} {
		if !strings.Contains(errs, msg) {
			t.Errorf("stderr %q lacks %q", errs, msg)
		}
	}
}

func TestTokenizeUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
		msg  string
	}{
		{"no tokenizer", nil, 2, "--tokenizer is required"},
		{"missing file", []string{"--tokenizer", filepath.Join(t.TempDir(), "nope.json")}, 2, "no such file"},
		{"bad flag", []string{"--bogus"}, 2, "flag provided but not defined"},
		{"negative blocks", []string{"--tokenizer", "x", "--blocks", "-1"}, 2, "--blocks must be positive"},
		{"extra arg", []string{"--tokenizer", "x", "extra"}, 2, "unexpected argument"},
		{"help", []string{"--help"}, 0, "usage: gateway tokenize"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runTok(t, "", tt.args...)
			if code != tt.want || !strings.Contains(errs, tt.msg) {
				t.Errorf("got %d %q, want %d containing %q", code, errs, tt.want, tt.msg)
			}
		})
	}
}
