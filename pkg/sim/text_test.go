package sim

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// modelDir returns a model directory fetched by `make testdata` (tools/testdata.sh); the test
// fails, not skips, when it is missing.
func modelDir(t testing.TB, family string) string {
	t.Helper()
	dir := filepath.Join("..", "..", ".cache", "tokenizers", family)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatalf("model %s missing (%v): run `make testdata`", family, err)
	}
	return dir
}

var (
	qwenOnce sync.Once
	qwenTok  *tokenizer.Tokenizer
	qwenErr  error
)

// loadQwen3 loads the Qwen3 tokenizer once for the package's tests (seconds under -race); a
// *tokenizer.Tokenizer is immutable and safe for concurrent use.
func loadQwen3(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	qwenOnce.Do(func() { qwenTok, qwenErr = tokenizer.LoadDir(modelDir(t, "qwen3")) })
	if qwenErr != nil {
		t.Fatalf("qwen3 tokenizer (run `make testdata`): %v", qwenErr)
	}
	return qwenTok
}

func TestIncrementalDetokenizer(t *testing.T) {
	tok := loadQwen3(t)
	text := "naïve café — 日本語のテキスト 🙂 done<|im_end|>"
	ids, err := tok.Encode(nil, text, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		skip bool
		want string
	}{{true, strings.TrimSuffix(text, "<|im_end|>")}, {false, text}} {
		d := NewTokenizerCodec(tok).NewDetokenizer(tt.skip)
		var got strings.Builder
		for _, id := range ids {
			piece := d.Add([]uint32{id})
			if strings.ContainsRune(piece, '\ufffd') {
				t.Errorf("emitted a broken character in %q", piece)
			}
			got.WriteString(piece)
		}
		if got.String() != tt.want {
			t.Errorf("incremental decode (skip special %v): got %q, want %q", tt.skip, got.String(), tt.want)
		}
	}
}
