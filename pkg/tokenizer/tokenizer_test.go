package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestStreamDecoderMatchesDecode(t *testing.T) {
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			tk := loadFamily(t, fam)
			for i, c := range readGolden(t, fam) {
				for _, skip := range []bool{false, true} {
					ids, err := tk.Encode(nil, c.Text, true)
					if err != nil {
						t.Fatal(err)
					}
					want, err := tk.Decode(ids, skip)
					if err != nil {
						t.Fatal(err)
					}
					d := tk.NewStreamDecoderSpecial(skip)
					var b strings.Builder
					for _, id := range ids {
						piece := d.Add(id)
						if !utf8.ValidString(piece) {
							t.Fatalf("case %d: Add returned invalid UTF-8 %q", i, piece)
						}
						b.WriteString(piece)
					}
					b.WriteString(d.Flush())
					if got := b.String(); got != want {
						t.Fatalf("case %d skip=%v: stream = %q, want %q", i, skip, got, want)
					}
				}
			}
		})
	}
}

func TestStreamDecoderSplitCharacters(t *testing.T) {
	tk := loadFamily(t, "qwen3")
	byteTok := func(b byte) uint32 {
		id, ok := tk.TokenID(string(byteToRune[b]))
		if !ok {
			t.Fatalf("no token for byte %#x", b)
		}
		return id
	}
	tests := []struct {
		name  string
		bytes []byte
		want  []string // result of each Add, then of Flush
	}{
		{"euro split in three", []byte("€"), []string{"", "", "€", ""}},
		{"emoji split in four", []byte("😀"), []string{"", "", "", "😀", ""}},
		{"truncated at end", []byte{0xE2, 0x82}, []string{"", "", "\uFFFD"}},
		{"invalid continuation", []byte{0xE2, 'a'}, []string{"", "\uFFFDa", ""}},
		{"stray continuation", []byte{0x80, 'b'}, []string{"\uFFFD", "b", ""}},
		{"surrogate encoding", []byte{0xED, 0xA0, 0x80}, []string{"", "\uFFFD\uFFFD", "\uFFFD", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tk.NewStreamDecoder()
			var got []string
			ids := make([]uint32, 0, len(tt.bytes))
			for _, b := range tt.bytes {
				ids = append(ids, byteTok(b))
				got = append(got, d.Add(byteTok(b)))
			}
			got = append(got, d.Flush())
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("pieces (-want +got):\n%s", diff)
			}
			whole, err := tk.Decode(ids, true)
			if err != nil {
				t.Fatal(err)
			}
			if joined := strings.Join(got, ""); joined != whole {
				t.Errorf("stream %q, Decode %q", joined, whole)
			}
		})
	}
}

// TestStreamDecoderByteFallback checks the SentencePiece-style decoder: a run of byte-fallback
// tokens is held until it ends, then becomes its text if it is valid UTF-8 and one U+FFFD per
// byte otherwise (tokenizers' ByteFallback decoder); the first leading space is stripped.
func TestStreamDecoderByteFallback(t *testing.T) {
	tk := loadFamily(t, "llama2")
	b := func(x byte) uint32 {
		id, ok := tk.TokenID(fmt.Sprintf("<0x%02X>", x))
		if !ok {
			t.Fatalf("no byte token %#x", x)
		}
		return id
	}
	the, _ := tk.TokenID("▁the")
	tests := []struct {
		name string
		ids  []uint32
		want []string // result of each Add, then of Flush
	}{
		{"emoji then word", []uint32{b(0xF0), b(0x9F), b(0x98), b(0x80), the}, []string{"", "", "", "", "😀 the", ""}},
		{"word then emoji", []uint32{the, b(0xF0), b(0x9F), b(0x98), b(0x80)}, []string{"the", "", "", "", "", "😀"}},
		{"invalid run", []uint32{b(0xF0), b('A'), the}, []string{"", "", "\uFFFD\uFFFD the", ""}},
		{"leading space only once", []uint32{b(' '), the}, []string{"", " the", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tk.NewStreamDecoder()
			var got []string
			for _, id := range tt.ids {
				got = append(got, d.Add(id))
			}
			got = append(got, d.Flush())
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("pieces (-want +got):\n%s", diff)
			}
			whole, err := tk.Decode(tt.ids, true)
			if err != nil {
				t.Fatal(err)
			}
			if joined := strings.Join(got, ""); joined != whole {
				t.Errorf("stream %q, Decode %q", joined, whole)
			}
		})
	}
}

func TestStreamDecoderSkipsSpecial(t *testing.T) {
	tk := loadFamily(t, "qwen3")
	ids, err := tk.Encode(nil, "<|im_start|>hi<|im_end|>", false)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	d := tk.NewStreamDecoder()
	for _, id := range ids {
		b.WriteString(d.Add(id))
	}
	b.WriteString(d.Flush())
	if got, want := b.String(), "hi"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := d.Add(uint32(tk.VocabSize() + 5)); got != "" {
		t.Errorf("unknown id: got %q, want \"\"", got)
	}
}

func TestAccessors(t *testing.T) {
	tests := []struct {
		fam            string
		bos, eos       string
		hasBOS         bool
		prefix, suffix []uint32
		vocab          int
		chatTemplate   bool
		spaceToken     string // spelling of " the" in the vocabulary; "" means "Ġthe"
	}{
		{fam: "qwen3", eos: "<|im_end|>", vocab: 151669, chatTemplate: true},
		{fam: "llama3", bos: "<|begin_of_text|>", hasBOS: true, eos: "<|end_of_text|>", vocab: 128256, chatTemplate: true},
		{fam: "llama3_1", bos: "<|begin_of_text|>", hasBOS: true, eos: "<|eot_id|>", prefix: []uint32{128000}, vocab: 128256, chatTemplate: true},
		{fam: "gptoss", bos: "<|startoftext|>", hasBOS: true, eos: "<|return|>", vocab: 200019},
		{fam: "llama2", bos: "<s>", hasBOS: true, eos: "</s>", prefix: []uint32{1}, vocab: 32000, chatTemplate: false, spaceToken: "▁the"},
		{fam: "gemma3", bos: "<bos>", hasBOS: true, eos: "<end_of_turn>", prefix: []uint32{2}, vocab: 262145, chatTemplate: true, spaceToken: "▁the"},
		{fam: "deepseek_v3", bos: "<｜begin▁of▁sentence｜>", hasBOS: true, eos: "<｜end▁of▁sentence｜>", prefix: []uint32{0}, vocab: 128815, chatTemplate: true},
	}
	for _, tt := range tests {
		t.Run(tt.fam, func(t *testing.T) {
			tk := loadFamily(t, tt.fam)
			if got := tk.VocabSize(); got != tt.vocab {
				t.Errorf("VocabSize() = %d, want %d", got, tt.vocab)
			}
			bos, ok := tk.BOS()
			if ok != tt.hasBOS {
				t.Errorf("BOS() ok = %v, want %v", ok, tt.hasBOS)
			}
			if ok {
				if name, _ := tk.Token(bos); name != tt.bos {
					t.Errorf("BOS token = %q, want %q", name, tt.bos)
				}
			}
			eos, ok := tk.EOS()
			if !ok {
				t.Fatal("EOS() missing")
			}
			if name, _ := tk.Token(eos); name != tt.eos {
				t.Errorf("EOS token = %q, want %q", name, tt.eos)
			}
			if id, ok := tk.TokenID(tt.eos); !ok || id != eos {
				t.Errorf("TokenID(%q) = %d, %v, want %d", tt.eos, id, ok, eos)
			}
			if !tk.IsSpecial(eos) {
				t.Errorf("IsSpecial(eos) = false")
			}
			prefix, suffix := tk.SpecialTokensAdded()
			if diff := cmp.Diff(tt.prefix, prefix); diff != "" {
				t.Errorf("prefix (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.suffix, suffix); diff != "" {
				t.Errorf("suffix (-want +got):\n%s", diff)
			}
			if got := tk.ChatTemplate() != ""; got != tt.chatTemplate {
				t.Errorf("has chat template = %v, want %v", got, tt.chatTemplate)
			}
			// A vocab entry is found by its tokenizer.json spelling.
			the := "Ġthe"
			if tt.spaceToken != "" {
				the = tt.spaceToken
			}
			id, ok := tk.TokenID(the)
			if !ok {
				t.Fatalf("TokenID(%q) not found", the)
			}
			want := " the"
			if tt.fam == "llama2" { // its decoder strips the leading space of the text
				want = "the"
			}
			if got, err := tk.Decode([]uint32{id}, false); err != nil || got != want {
				t.Errorf("Decode(%s) = %q, %v, want %q", the, got, err, want)
			}
			if _, ok := tk.TokenID("no such token, surely"); ok {
				t.Error("TokenID of a missing token reported ok")
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	tk := loadFamily(t, "qwen3")
	t.Run("invalid UTF-8", func(t *testing.T) {
		dst := []uint32{7}
		got, err := tk.Encode(dst, "ok \xff\xfe bad", false)
		if !errors.Is(err, ErrInvalidUTF8) {
			t.Fatalf("err = %v, want ErrInvalidUTF8", err)
		}
		if diff := cmp.Diff([]uint32{7}, got); diff != "" {
			t.Errorf("dst changed (-want +got):\n%s", diff)
		}
	})
	t.Run("NUL bytes are text", func(t *testing.T) {
		got, err := tk.Encode(nil, "a\x00b", false)
		if err != nil {
			t.Fatal(err)
		}
		nul, _ := tk.TokenID(string(byteToRune[0]))
		if diff := cmp.Diff([]uint32{64, nul, 65}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("unknown id", func(t *testing.T) {
		if _, err := tk.Decode([]uint32{1, uint32(tk.VocabSize())}, false); !errors.Is(err, ErrUnknownID) {
			t.Errorf("err = %v, want ErrUnknownID", err)
		}
	})
	// 10 MB inputs of the shapes that stress a tokenizer: one huge word (BPE on 10M symbols, about
	// 1 s per MB; the Rust library takes 3-5x longer), one whitespace run (the lookahead
	// backtracks), and ordinary text. Each must finish and decode back to the input. The two
	// pathological shapes exercise code shared by every family, so they run on one. Under the race
	// detector every input is cut to 1 MB to keep the test quick.
	worst, size := 10<<20, 10<<20
	if raceEnabled {
		worst, size = 1<<20, 1<<20
	}
	type bigCase struct{ fam, name, text string }
	cases := []bigCase{
		{"qwen3", "one word", strings.Repeat("a", worst)},
		{"deepseek_v3", "whitespace", strings.Repeat(" ", worst-1) + "x"},
	}
	for _, fam := range families {
		cases = append(cases,
			bigCase{fam, "prose", strings.Repeat("The quick brown fox jumps over the lazy dog; 12345! ", size/52)},
			bigCase{fam, "digits and CJK", strings.Repeat("9", size/2) + strings.Repeat("漢字かな", size/2/12)})
	}
	for _, c := range cases {
		t.Run(c.fam+"/"+c.name, func(t *testing.T) {
			tk := loadFamily(t, c.fam)
			start := time.Now()
			ids, err := tk.Encode(nil, c.text, false)
			if err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el > 60*time.Second {
				t.Errorf("took %v", el)
			}
			back, err := tk.Decode(ids, false)
			if err != nil {
				t.Fatal(err)
			}
			want := c.text
			if c.fam == "gpt2style" { // ByteLevel add_prefix_space
				want = " " + want
			}
			if back != want {
				t.Errorf("round trip differs (len %d vs %d)", len(back), len(c.text))
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	minimal := func(pre, model string) string {
		return `{"added_tokens":[],"normalizer":null,"pre_tokenizer":` + pre + `,"post_processor":null,"decoder":{"type":"ByteLevel"},"model":` + model + `}`
	}
	byteLevel := `{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}`
	okModel := `{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}`
	tests := []struct {
		name    string
		path    string
		wantErr error
	}{
		{"missing file", filepath.Join(dir, "nope", "tokenizer.json"), os.ErrNotExist},
		{"empty file", write("empty/tokenizer.json", ""), ErrMalformed},
		{"not json", write("garbage/tokenizer.json", "{\"model\": [1,2"), ErrMalformed},
		{"no model", write("nomodel/tokenizer.json", `{"added_tokens":[]}`), ErrMalformed},
		{"unigram", write("unigram/tokenizer.json", minimal(byteLevel, `{"type":"Unigram","vocab":[["a",0.0]]}`)), ErrUnsupported},
		{"unknown regex", write("regex/tokenizer.json", minimal(`{"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Isolated","invert":false}`, okModel)), ErrUnsupported},
		{"unsupported normalizer", write("norm/tokenizer.json", strings.Replace(minimal(byteLevel, okModel), `"normalizer":null`, `"normalizer":{"type":"BertNormalizer"}`, 1)), ErrUnsupported},
		{"wordpiece", write("wp/tokenizer.json", minimal(`null`, `{"type":"WordPiece","vocab":{"a":0}}`)), ErrUnsupported},
		{"merge not in vocab", write("badmerge/tokenizer.json", minimal(byteLevel, `{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]}`)), ErrMalformed},
		{"bad config", func() string {
			write("badcfg/tokenizer_config.json", "{")
			return write("badcfg/tokenizer.json", minimal(byteLevel, okModel))
		}(), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk, err := LoadFile(tt.path)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("LoadFile error = %v, want %v", err, tt.wantErr)
			}
			if tk != nil {
				t.Error("non-nil tokenizer with an error")
			}
			if !strings.Contains(err.Error(), tt.path) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
	t.Run("minimal ok", func(t *testing.T) {
		tk, err := LoadFile(write("ok/tokenizer.json", minimal(byteLevel, okModel)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := tk.Encode(nil, "abba", false)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]uint32{2, 1, 0}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

// TestLoadPath checks LoadPath's choice between a model directory and a tokenizer.json, and
// its nil, nil for an empty path.
func TestLoadPath(t *testing.T) {
	root := t.TempDir()
	write := func(name string, vocab string) string {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		content := `{"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},"post_processor":null,"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":` + vocab + `,"merges":["a b"]}}`
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("model/tokenizer.json", `{"a":0,"b":1,"ab":2}`)
	dir := filepath.Join(root, "model")
	file := write("other/tokenizer.json", `{"a":0,"b":1,"ab":2,"c":3}`)
	tests := []struct {
		name      string
		path      string
		wantVocab int // 0: no tokenizer
		wantErr   error
	}{
		{"empty", "", 0, nil},
		{"dir", dir, 3, nil},
		{"file", file, 4, nil},
		{"missing", filepath.Join(root, "nope"), 0, os.ErrNotExist},
		{"missing file", filepath.Join(root, "nope.json"), 0, os.ErrNotExist},
		{"dir without tokenizer.json", root, 0, os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk, err := LoadPath(tt.path)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("LoadPath error = %v, want %v", err, tt.wantErr)
			}
			switch {
			case tt.wantVocab == 0 && tk != nil:
				t.Errorf("got a tokenizer (vocab %d), want nil", tk.VocabSize())
			case tt.wantVocab != 0 && tk == nil:
				t.Errorf("got nil, want a tokenizer of vocab %d", tt.wantVocab)
			case tt.wantVocab != 0 && tk.VocabSize() != tt.wantVocab:
				t.Errorf("got vocab %d, want %d", tk.VocabSize(), tt.wantVocab)
			}
		})
	}
}

func TestConcurrentEncode(t *testing.T) {
	tk := loadFamily(t, "llama3")
	cases := readGolden(t, "llama3")
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]uint32, 0, 1024)
			for i := range cases {
				c := cases[(i+g*37)%len(cases)]
				got, err := tk.Encode(buf[:0], c.Text, false)
				if err != nil || !cmp.Equal(got, c.IDs, cmp.Comparer(func(a, b []uint32) bool { return len(a) == len(b) && (len(a) == 0 || cmp.Equal(a, b)) })) {
					select {
					case errs <- c.Text:
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for text := range errs {
		t.Errorf("concurrent Encode mismatch for %q", text)
	}
}

func TestEncodeAllocs(t *testing.T) {
	tk := loadFamily(t, "qwen3")
	text := "The committee reviewed 42 proposals, approved 17, and deferred the rest. 机器学习是人工智能的一个分支。 func main() { return x }"
	buf := make([]uint32, 0, 256)
	if _, err := tk.Encode(buf, text, true); err != nil { // warm the word cache
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := tk.Encode(buf[:0], text, true); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Errorf("Encode allocates %.1f times per call with a buffer, want <= 1", allocs)
	}
}

// TestLoadTruncated feeds every prefix of a valid tokenizer.json (and some hostile inputs) to
// Load: each must fail cleanly with ErrMalformed, never panic or hang.
func TestLoadTruncated(t *testing.T) {
	// "<s>" gets id 4, the first id after the model vocabulary, as tokenizers assigns it.
	valid := `{"version":"1.0","added_tokens":[{"id":4,"content":"<s>","special":true}],"normalizer":{"type":"NFC"},` +
		`"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},"post_processor":null,` +
		`"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","dropout":null,"unk_token":null,` +
		`"vocab":{"a":0,"b":1,"ab":2,"\u0120":4},"merges":[["a","b"]]}}`
	tk, err := Load([]byte(valid), nil)
	if err != nil {
		t.Fatalf("valid input: %v", err)
	}
	if got, err := tk.Encode(nil, "ab<s>", false); err != nil || !cmp.Equal(got, []uint32{2, 4}) {
		t.Fatalf("Encode = %v, %v, want [2 4]", got, err)
	}
	for n := range len(valid) - 1 {
		if _, err := Load([]byte(valid[:n]), nil); !errors.Is(err, ErrMalformed) {
			t.Fatalf("prefix of %d bytes: err = %v, want ErrMalformed", n, err)
		}
	}
	hostile := []string{
		strings.Repeat("[", 100000),
		`{"model":{"type":"BPE","vocab":` + strings.Repeat(`{"a":`, 1000) + `}}`,
		`{"model":{"type":"BPE","vocab":{"a":-1},"merges":[]}}`,
		`{"model":{"type":"BPE","vocab":{"a":1.5},"merges":[]}}`,
		`{"model":{"type":"BPE","vocab":{"a":99999999999},"merges":[]}}`,
		`{"model":{"type":"BPE","vocab":{"a":0},"merges":[["a","a","a"]]}}`,
		`{"model":{"type":"BPE","vocab":{"a":0},"merges":["a"]}}`,
		`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]}} trailing`,
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\x01\":0},\"merges\":[]}}",
		`{"added_tokens":"no","model":{"type":"BPE","vocab":{},"merges":[]}}`,
	}
	for i, h := range hostile {
		if _, err := Load([]byte(h), nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("hostile input %d: err = %v, want ErrMalformed", i, err)
		}
	}
}

func TestEncodeOrdinary(t *testing.T) {
	tk, err := LoadDir(filepath.Join("..", "..", ".cache", "tokenizers", "gptoss"))
	if err != nil {
		t.Fatalf("gpt-oss tokenizer missing (%v): run `make testdata`", err)
	}
	for _, tt := range []struct{ name, text string }{
		{"plain text equals Encode", "Hello, world! 日本"},
		{"special token text stays text", "a<|start|>user<|message|>b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tk.EncodeOrdinary(nil, tt.text)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range got {
				if tk.IsSpecial(id) {
					t.Errorf("got special id %d in %v, want ordinary ids only", id, got)
				}
			}
			back, err := tk.Decode(got, false)
			if err != nil || back != tt.text {
				t.Errorf("got decode %q (%v), want %q", back, err, tt.text)
			}
			if !strings.Contains(tt.text, "<|") {
				want, _ := tk.Encode(nil, tt.text, false)
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("(-Encode +EncodeOrdinary):\n%s", d)
				}
			}
		})
	}
}
