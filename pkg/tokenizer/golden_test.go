package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/kvgate/kvgate/internal/harness"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// families are the tokenizers fetched by `make testdata` into .cache/tokenizers/<family>/.
var families = []string{"qwen3", "llama3", "llama3_1", "deepseek_v3", "gptoss", "llama2", "gemma3", "gpt2style", "addedflags"}

func moduleRoot(t testing.TB) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*Tokenizer{}
)

// loadFamily loads a cached real tokenizer; the test fails (not skips) when the cache is missing.
func loadFamily(t testing.TB, fam string) *Tokenizer {
	t.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if tk := loaded[fam]; tk != nil {
		return tk
	}
	dir := filepath.Join(moduleRoot(t), ".cache", "tokenizers", fam)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatalf("tokenizer %s missing (%v): run `make testdata`", fam, err)
	}
	tk, err := LoadDir(dir)
	if err != nil {
		t.Fatalf("LoadDir(%s): %v", dir, err)
	}
	loaded[fam] = tk
	return tk
}

type goldenCase struct {
	Text       string   `json:"text"`
	IDs        []uint32 `json:"ids"`
	IDsSpecial []uint32 `json:"ids_special"`
	Decoded    string   `json:"decoded"`
}

func readGolden(t testing.TB, fam string) []goldenCase {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "golden_"+fam+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []goldenCase
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var c goldenCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("golden_%s line %d: %v", fam, len(out)+1, err)
		}
		if c.IDs == nil {
			c.IDs = []uint32{}
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 100 {
		t.Fatalf("golden_%s has only %d cases", fam, len(out))
	}
	return out
}

// wantSpecial is what Encode(text, true) must return given the reference library's encode with
// add_special_tokens (which applies only tokenizer.json's post-processor). transformers and vLLM
// also honour tokenizer_config.json: DeepSeek V3 sets add_bos_token=true (LlamaTokenizerFast), so
// its BOS <｜begin▁of▁sentence｜> (id 0) is prepended although the post-processor is ByteLevel.
func wantSpecial(fam string, c goldenCase) []uint32 {
	if fam == "deepseek_v3" {
		return append([]uint32{0}, c.IDsSpecial...)
	}
	return c.IDsSpecial
}

func TestGolden(t *testing.T) {
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			tk := loadFamily(t, fam)
			cases := readGolden(t, fam)
			fails := 0
			for i, c := range cases {
				got, err := tk.Encode(nil, c.Text, false)
				if err != nil {
					t.Fatalf("case %d: Encode: %v", i, err)
				}
				if got == nil {
					got = []uint32{}
				}
				if d := cmp.Diff(c.IDs, got); d != "" {
					fails++
					if fails <= 5 {
						t.Errorf("case %d %q: raw ids mismatch (-want +got):\n%s", i, c.Text, d)
					}
					continue
				}
				gotS, err := tk.Encode(make([]uint32, 0, 4), c.Text, true)
				if err != nil {
					t.Fatalf("case %d: Encode special: %v", i, err)
				}
				if d := cmp.Diff(wantSpecial(fam, c), gotS); d != "" {
					fails++
					if fails <= 5 {
						t.Errorf("case %d %q: ids with special tokens mismatch (-want +got):\n%s", i, c.Text, d)
					}
				}
				dec, err := tk.Decode(c.IDs, false)
				if err != nil {
					t.Fatalf("case %d: Decode: %v", i, err)
				}
				if dec != c.Decoded {
					fails++
					if fails <= 5 {
						t.Errorf("case %d: Decode = %q, want %q", i, dec, c.Decoded)
					}
				}
			}
			if fails > 0 {
				t.Errorf("%d of %d golden cases failed", fails, len(cases))
			}
		})
	}
}
