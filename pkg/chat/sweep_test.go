package chat

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/pkg/openai"
)

// sweepDivergent lists, per template, the sweep cases that cannot match and why (none: every
// case matches).
var sweepDivergent = []struct {
	template, reason string
	cases            []string
}{}

// knownSweepDivergences are the (template, case) pairs of sweepDivergent with their reason;
// as in TestGolden, every other pair must match and a listed pair that starts matching fails.
var knownSweepDivergences = func() map[string]string {
	m := map[string]string{}
	for _, d := range sweepDivergent {
		for _, c := range d.cases {
			m[d.template+"/"+c] = d.reason
		}
	}
	return m
}()

// TestSweep renders every test conversation with every distinct real template of
// @huggingface/ollama-utils (95, generic special tokens) and compares each prompt's SHA-256
// prefix, or the rejection, with the reference (tools/chat/gen.py, sweep.jsonl).
func TestSweep(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "golden", "sweep.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	convs := readConversations(t)
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	exact, total, templates, fully := 0, 0, 0, 0
	var failures []string
	seen := map[string]bool{}
	for sc.Scan() {
		var line struct {
			Template string            `json:"template"`
			Format   string            `json:"format"`
			Cases    map[string]string `json:"cases"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		templates++
		src, err := os.ReadFile(repoPath(".cache", "templates", "sweep", line.Template+".jinja"))
		if err != nil {
			t.Fatalf("sweep template %s missing (%v): run `make testdata`", line.Template, err)
		}
		if got := DetectContentFormat(string(src)); got != line.Format {
			failures = append(failures, fmt.Sprintf("%s: content format: got %s, want %s", line.Template, got, line.Format))
		}
		r, err := newRenderer(&modelFiles{templates: map[string]string{"default": string(src)},
			specials: []special{{name: "bos_token", value: "<s>"}, {name: "eos_token", value: "</s>"}}},
			Options{Now: func() time.Time { return goldenNow }})
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", line.Template, err))
			continue
		}
		all := true
		for _, c := range convs {
			want, ok := line.Cases[c.ID]
			if !ok {
				t.Fatalf("sweep.jsonl has no case %s: regenerate with tools/chat/gen.py", c.ID)
			}
			total++
			key := line.Template + "/" + c.ID
			got := sweepResult(r, c.Request, want)
			_, known := knownSweepDivergences[key]
			if known {
				seen[key] = true
			}
			switch {
			case got == want && known:
				failures = append(failures, key+": listed in knownSweepDivergences but now matches")
			case got == want:
				exact++
			case !known:
				all = false
				failures = append(failures, fmt.Sprintf("%s: got %q, want %q", key, got, want))
			default:
				all = false
			}
		}
		if all {
			fully++
		}
	}
	for k := range knownSweepDivergences {
		if !seen[k] {
			failures = append(failures, k+": listed in knownSweepDivergences but not a sweep case")
		}
	}
	sort.Strings(failures)
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("sweep: %d/%d cases exact, %d/%d templates fully exact, %d known divergences", exact, total, fully, templates, len(knownSweepDivergences))
}

// sweepResult renders one body as the sweep records it: the prompt's SHA-256 prefix, or "!"
// and, when the reference gives an exact message, the message.
func sweepResult(r *Renderer, body []byte, want string) string {
	req, perr := parseForSweep(body)
	if perr == "" {
		text, err := r.RenderText(req)
		if err == nil {
			sum := sha256.Sum256([]byte(text))
			return hex.EncodeToString(sum[:])[:16]
		}
		perr = err.Message
	}
	if strings.HasPrefix(want, "!") && len(want) > 1 {
		return "!" + perr
	}
	return "!"
}

func parseForSweep(body []byte) (*openai.ChatRequest, string) {
	req, err := openai.ParseChat(body, openai.Limits{})
	if err != nil {
		return nil, err.Message
	}
	return req, ""
}
