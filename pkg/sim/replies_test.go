package sim

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCoreScript: a scripted request emits exactly its script and stops; max_tokens cuts it;
// ignore_eos and min_tokens carry it past the script's end (which stands for the model's EOS)
// with sampled tokens.
func TestCoreScript(t *testing.T) {
	tests := []struct {
		name       string
		script     []uint32
		maxTokens  int
		minTokens  int
		ignoreEOS  bool
		wantOut    []uint32 // the output starts with these
		wantLen    int
		wantFinish string
	}{
		{"whole script", []uint32{7, 8, 9}, 100, 0, false, []uint32{7, 8, 9}, 3, "stop"},
		{"cut by max_tokens", []uint32{7, 8, 9}, 2, 0, false, []uint32{7, 8}, 2, "length"},
		{"script exactly max_tokens", []uint32{7, 8}, 2, 0, false, []uint32{7, 8}, 2, "stop"},
		{"ignore_eos runs to max_tokens", []uint32{7, 8, 9}, 6, 0, true, []uint32{7, 8, 9}, 6, "length"},
		{"min_tokens past the script", []uint32{7, 8, 9}, 100, 5, false, []uint32{7, 8, 9}, 5, "stop"},
		{"min_tokens within the script", []uint32{7, 8, 9}, 100, 2, false, []uint32{7, 8, 9}, 3, "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustCore(t, Config{})
			r := newReq("s", seqTokens(0, 40), tt.maxTokens)
			r.Script, r.MinTokens, r.IgnoreEOS = tt.script, tt.minTokens, tt.ignoreEOS
			drive(t, c, []arrival{{0, r}})
			out := r.Output()
			if len(out) != tt.wantLen {
				t.Errorf("output length: got %d (%v), want %d", len(out), out, tt.wantLen)
			}
			if d := cmp.Diff(tt.wantOut, out[:min(len(out), len(tt.wantOut))]); d != "" {
				t.Errorf("output start (-want +got):\n%s", d)
			}
			if r.FinishReason != tt.wantFinish {
				t.Errorf("finish reason: got %q, want %q", r.FinishReason, tt.wantFinish)
			}
		})
	}
}

func writeReplies(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "replies.jsonl")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// byteEncode is a test tokenizer: one token per byte.
func byteEncode(s string) ([]uint32, error) {
	out := make([]uint32, len(s))
	for i := range len(s) {
		out[i] = uint32(s[i])
	}
	return out, nil
}

func TestLoadRepliesCycles(t *testing.T) {
	r, err := LoadReplies(writeReplies(t, "\"ab\"\n\n\"c\"\n"), byteEncode)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]uint32
	for range 5 {
		got = append(got, r.Next())
	}
	want := [][]uint32{{'a', 'b'}, {'c'}, {'a', 'b'}, {'c'}, {'a', 'b'}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("replies (-want +got):\n%s", d)
	}
	if (*Replies)(nil).Next() != nil {
		t.Error("a nil Replies scripted a reply")
	}
}

func TestLoadRepliesErrors(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"not a JSON string", "\"ok\"\nplain text\n", "line 2"},
		{"empty reply", "\"\"\n", "no tokens"},
		{"no reply", "\n\n", "no reply"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadReplies(writeReplies(t, tt.body), byteEncode)
			if !errors.Is(err, ErrBadReplies) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want ErrBadReplies mentioning %q", err, tt.want)
			}
		})
	}
	if _, err := LoadReplies(filepath.Join(t.TempDir(), "missing"), byteEncode); !errors.Is(err, ErrBadReplies) {
		t.Errorf("missing file: got %v, want ErrBadReplies", err)
	}
}
