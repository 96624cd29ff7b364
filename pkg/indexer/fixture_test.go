package indexer

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"os"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

const fixtureDir = "../../testdata/fixtures/kvevents/"

// decodeArrayBatch decodes one array-format msgpack payload of the simulator fixtures
// (README "Wire layout") into engine-neutral events. It is a test helper, not the product
// decoder (that lives in pkg/kvbridge).
func decodeArrayBatch(t *testing.T, b []byte) []Event {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("decode batch: %v", err)
		}
	}
	var n uint32
	var err error
	_, b, err = msgp.ReadArrayHeaderBytes(b)
	must(err)
	_, b, err = msgp.ReadFloat64Bytes(b)
	must(err)
	nev, b, err := msgp.ReadArrayHeaderBytes(b)
	must(err)
	u64s := func() []uint64 {
		n, b, err = msgp.ReadArrayHeaderBytes(b)
		must(err)
		out := make([]uint64, n)
		for i := range out {
			out[i], b, err = msgp.ReadUint64Bytes(b)
			must(err)
		}
		return out
	}
	optInt := func() (int64, bool) {
		if msgp.IsNil(b) {
			b, err = msgp.ReadNilBytes(b)
			must(err)
			return 0, false
		}
		var v int64
		v, b, err = msgp.ReadInt64Bytes(b)
		must(err)
		return v, true
	}
	optStr := func() string {
		if msgp.IsNil(b) {
			b, err = msgp.ReadNilBytes(b)
			must(err)
			return ""
		}
		var s string
		s, b, err = msgp.ReadStringBytes(b)
		must(err)
		return s
	}
	var evs []Event
	for range nev {
		_, b, err = msgp.ReadArrayHeaderBytes(b)
		must(err)
		var kind string
		kind, b, err = msgp.ReadStringBytes(b)
		must(err)
		switch kind {
		case "BlockStored":
			ev := Event{Kind: EventStored, Hashes: u64s()}
			if msgp.IsNil(b) {
				b, err = msgp.ReadNilBytes(b)
			} else {
				// 0 means "no parent" in the array format (README "Wire layout").
				ev.Parent, b, err = msgp.ReadUint64Bytes(b)
				ev.HasParent = ev.Parent != 0
			}
			must(err)
			for _, tk := range u64s() {
				ev.Tokens = append(ev.Tokens, uint32(tk))
			}
			bs, _ := optInt()
			ev.BlockSize = int(bs)
			ev.LoraID, ev.HasLoraID = optInt()
			ev.Medium = optStr()
			ev.LoraName = optStr()
			b, err = msgp.Skip(b) // extra_keys
			must(err)
			evs = append(evs, ev)
		case "BlockRemoved":
			ev := Event{Kind: EventRemoved, Hashes: u64s()}
			ev.Medium = optStr()
			evs = append(evs, ev)
		case "AllBlocksCleared":
			evs = append(evs, Event{Kind: EventCleared})
		default:
			t.Fatalf("unknown event %q", kind)
		}
	}
	return evs
}

func readLines(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(fixtureDir + name)
	if err != nil {
		t.Fatalf("open fixture: %v", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestSimulatorFixture replays the live capture of llm-d-inference-sim into an Index and checks
// Match against the cached_tokens the simulator reported for the same prompts: exactly for the
// first request of each phase (the cache is then what the earlier batches described) and within
// [before, after] the phase's batch for the others.
func TestSimulatorFixture(t *testing.T) {
	var batches [][]Event
	for _, l := range readLines(t, "sim-array-live.jsonl") {
		var m struct {
			Frames []string `json:"frames_b64"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		payload, err := base64.StdEncoding.DecodeString(m.Frames[2])
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, decodeArrayBatch(t, payload))
	}
	if len(batches) != 8 {
		t.Fatalf("got %d batches, want 8", len(batches))
	}
	type request struct {
		phase  int
		model  string
		prompt []uint32
		cached int
	}
	var reqs []request
	for _, l := range readLines(t, "requests.jsonl") {
		var r struct {
			Instance string          `json:"instance"`
			Phase    string          `json:"phase"`
			Request  json.RawMessage `json:"request"`
			Usage    struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		var body struct {
			Model  string `json:"model"`
			Prompt any    `json:"prompt"`
		}
		if r.Instance != "array" || json.Unmarshal(r.Request, &body) != nil {
			continue
		}
		list, ok := body.Prompt.([]any)
		if !ok {
			continue // text prompts go through the simulator's own tokenizer
		}
		var p []uint32
		for _, v := range list {
			p = append(p, uint32(v.(float64)))
		}
		reqs = append(reqs, request{phase: int(r.Phase[1] - '0'), model: body.Model, prompt: p, cached: r.Usage.Details.Cached})
	}
	if len(reqs) < 15 {
		t.Fatalf("got %d token-list requests, want at least 15", len(reqs))
	}
	ix := mustNew(t, Config{})
	match := func(ix *Index, r request) int {
		ns := ""
		if r.model != "sim-model" {
			ns = Namespace(r.model, 0, false, "")
		}
		best := 0
		for _, m := range ix.Match(AppendBlockKeys(nil, r.prompt, 16, ns), nil) {
			best = max(best, m.Blocks)
		}
		return 16 * best
	}
	applied := 0
	for i, r := range reqs {
		for applied < r.phase-1 {
			if res := ix.Apply(0, batches[applied]); res.UnknownParents != 0 || res.Skipped != 0 {
				t.Fatalf("batch %d: %+v, want no unknown parents or skips", applied+1, res)
			}
			applied++
		}
		before := match(ix, r)
		if i == 0 || reqs[i-1].phase != r.phase {
			if before != r.cached {
				t.Errorf("phase %d first request (%s, %d tokens): index says %d cached tokens, simulator %d",
					r.phase, r.model, len(r.prompt), before, r.cached)
			}
			continue
		}
		probe := mustNew(t, Config{})
		for _, b := range batches[:r.phase] {
			probe.Apply(0, b)
		}
		after := match(probe, r)
		if r.phase != 6 && (r.cached < before || r.cached > after) {
			t.Errorf("phase %d request %d: simulator cached %d, index %d before and %d after the batch",
				r.phase, i, r.cached, before, after)
		}
	}
}
