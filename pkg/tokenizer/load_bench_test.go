package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// stdlibTokenizerJSON is what parseTokenizerJSON extracts, decoded by encoding/json alone: the
// comparison behind keeping the hand-written scanner (jsonscan.go).
type stdlibTokenizerJSON struct {
	fileJSON
	Model struct {
		Type   string            `json:"type"`
		Vocab  map[string]uint32 `json:"vocab"`
		Merges []json.RawMessage `json:"merges"`
	} `json:"model"`
}

// BenchmarkParseTokenizerJSON parses real tokenizer.json files with the scanner and with
// encoding/json into the same data (vocab map and merges; merges left as raw spans for
// encoding/json, which flatters it).
func BenchmarkParseTokenizerJSON(b *testing.B) {
	for _, fam := range []string{"qwen3", "gemma3"} {
		data, err := os.ReadFile(filepath.Join("..", "..", ".cache", "tokenizers", fam, "tokenizer.json"))
		if err != nil {
			b.Skipf("no tokenizer test data (%v): run make testdata", err)
		}
		b.Run(fam+"/scanner", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := parseTokenizerJSON(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fam+"/encoding_json", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				var f stdlibTokenizerJSON
				if err := json.Unmarshal(data, &f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
