package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// vLLM Mooncake roles (pd.go, pd_http.go; wire/pd.md §§3, 7.2).

// mooncakeParams are a pair's two kv_transfer_params for transfer id, whose prefill server is p.
func mooncakeParams(p *testEnv, id, engine string) (prefill, decode string) {
	prefill = fmt.Sprintf(`{"do_remote_decode":true,"do_remote_prefill":false,"transfer_id":%q}`, id)
	decode = fmt.Sprintf(`{"do_remote_decode":false,"do_remote_prefill":true,"transfer_id":%q,"remote_engine_id":%q,"remote_bootstrap_addr":%q}`, id, engine, p.boot.URL)
	return prefill, decode
}

func TestPDMooncakeQuery(t *testing.T) {
	p, _, _ := pdTrio(t, PDTransferMooncake, 0)
	resp, err := http.Get(p.boot.URL + "/query")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var q map[string]struct {
		EngineID string `json:"engine_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&q); err != nil || len(q) != 1 || q["0"].EngineID != p.s.pd.cfg.EngineID || q["0"].EngineID == "" {
		t.Errorf("GET /query: %v %v, want rank 0 with the engine id %q", q, err, p.s.pd.cfg.EngineID)
	}
}

// The legs at once, either first: the decode answer equals the aggregated one, the decode
// server caches (and publishes) the transferred blocks, the prefill answers without params and
// frees its blocks after the read.
func TestPDMooncakePair(t *testing.T) {
	for _, decodeFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("decodeFirst=", decodeFirst), func(t *testing.T) {
			// Asked first, the prefill's read waits up to the wait bound for the prefill: a
			// bound far longer than the test's 10 s shows the prefill wakes the read.
			wait := time.Second
			if decodeFirst {
				wait = time.Minute
			}
			p, d, agg := pdTrio(t, PDTransferMooncake, wait)
			engine := p.s.pd.cfg.EngineID
			ids := idsJSON(seqTokens(1, 101))
			pkv, dkv := mooncakeParams(p, "xfer-1", engine)
			req := `{"prompt":` + ids + `,"max_tokens":8,"return_token_ids":true%s}`
			var dc, pc chan [2]any
			if decodeFirst {
				dc = postAsync(t, d, fmt.Sprintf(req, `,"kv_transfer_params":`+dkv))
				asked := func() bool {
					p.s.pd.mu.Lock()
					defer p.s.pd.mu.Unlock()
					return p.s.pd.pushes["xfer-1"] != nil
				}
				for deadline := time.Now().Add(5 * time.Second); !asked(); time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the decode server's read never waited at the prefill server")
					}
				}
				pc = postAsync(t, p, `{"prompt":`+ids+`,"max_tokens":1,"stream":false,"kv_transfer_params":`+pkv+`}`)
			} else {
				pc = postAsync(t, p, `{"prompt":`+ids+`,"max_tokens":1,"stream":false,"kv_transfer_params":`+pkv+`}`)
				dc = postAsync(t, d, fmt.Sprintf(req, `,"kv_transfer_params":`+dkv))
			}
			var pres, dres [2]any
			for _, c := range []struct {
				ch  chan [2]any
				out *[2]any
			}{{pc, &pres}, {dc, &dres}} {
				select {
				case *c.out = <-c.ch:
				case <-time.After(10 * time.Second):
					t.Fatal("a leg did not answer within 10 s: the prefill did not wake the waiting read")
				}
			}
			if pres[0] != http.StatusOK || dres[0] != http.StatusOK {
				t.Fatalf("prefill %v, decode %v", pres, dres)
			}
			if strings.Contains(pres[1].(string), "kv_transfer_params") {
				t.Errorf("prefill answer %s: a Mooncake prefill returns no kv_transfer_params", pres[1])
			}
			var dr, ar completionResp
			_ = json.Unmarshal([]byte(dres[1].(string)), &dr)
			_, abody := agg.post(t, fmt.Sprintf(req, ""))
			_ = json.Unmarshal(abody, &ar)
			if diff := cmp.Diff(ar.Choices, dr.Choices); diff != "" || len(dr.Choices) == 0 {
				t.Errorf("decode answer differs from the aggregated one (-agg +decode):\n%s", diff)
			}
			if got := storedTokens(d.sink); got != 96 {
				t.Errorf("decode server stored %d tokens' blocks, want the prompt's 6 full blocks (96)", got)
			}
			if got := usedBlocks(p.ranks[0]); got != 0 {
				t.Errorf("prefill still holds %d blocks after the read", got)
			}
			// The read released the transfer: a second decode with it fails (after the wait bound).
			if decodeFirst {
				return
			}
			if status, body := d.post(t, fmt.Sprintf(req, `,"kv_transfer_params":`+dkv)); status != http.StatusInternalServerError || !strings.Contains(string(body), "KV transfer failed") {
				t.Errorf("second read: %d %s, want 500 KV transfer failed", status, body)
			}
		})
	}
}

func TestPDMooncakeBadInput(t *testing.T) {
	p, d, _ := pdTrio(t, PDTransferMooncake, 50*time.Millisecond)
	engine := p.s.pd.cfg.EngineID
	ids := idsJSON(seqTokens(1, 101))
	_, full := mooncakeParams(p, "xfer-2", engine)
	for _, tt := range []struct{ name, kv string }{
		{"no transfer_id", fmt.Sprintf(`{"do_remote_prefill":true,"remote_engine_id":%q,"remote_bootstrap_addr":%q}`, engine, p.boot.URL)},
		{"no engine", fmt.Sprintf(`{"do_remote_prefill":true,"transfer_id":"x","remote_bootstrap_addr":%q}`, p.boot.URL)},
		{"no addr", fmt.Sprintf(`{"do_remote_prefill":true,"transfer_id":"x","remote_engine_id":%q}`, engine)},
		{"bad addr", fmt.Sprintf(`{"do_remote_prefill":true,"transfer_id":"x","remote_engine_id":%q,"remote_bootstrap_addr":"tcp://h:1"}`, engine)},
	} {
		if status, body := d.post(t, `{"prompt":`+ids+`,"kv_transfer_params":`+tt.kv+`}`); status != http.StatusBadRequest {
			t.Errorf("%s: decode got %d %s, want 400", tt.name, status, body)
		}
	}
	// Another engine's id: the prefill side refuses the read.
	wrong := strings.Replace(full, engine, "other-engine", 1)
	if status, body := d.post(t, `{"prompt":`+ids+`,"kv_transfer_params":`+wrong+`}`); status != http.StatusInternalServerError || !strings.Contains(string(body), "KV transfer failed") {
		t.Errorf("wrong engine: %d %s, want 500 KV transfer failed", status, body)
	}
	// A decode whose prefill never comes ends within the wait bound.
	start := time.Now()
	if status, body := d.post(t, `{"prompt":`+ids+`,"kv_transfer_params":`+full+`}`); status != http.StatusInternalServerError || time.Since(start) > 5*time.Second {
		t.Errorf("lonely decode: %d %s after %v", status, body, time.Since(start))
	}
	// Without kv_transfer_params the decode server runs the request whole (the gateway's
	// fallback); a prefill without a transfer_id is an ordinary request.
	if status, body := d.post(t, `{"prompt":`+ids+`,"max_tokens":2}`); status != http.StatusOK {
		t.Errorf("whole request on the decode server: %d %s", status, body)
	}
	if status, body := p.post(t, `{"prompt":`+ids+`,"max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}}`); status != http.StatusOK || usedBlocks(p.ranks[0]) != 0 {
		t.Errorf("prefill without transfer_id: %d %s, %d blocks held", status, body, usedBlocks(p.ranks[0]))
	}
	resp, err := http.Get(p.boot.URL + "/pd/mooncake/xfer-none?engine_id=" + engine)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGone {
		t.Errorf("read of an unknown transfer: %d %s, want 410 after the wait", resp.StatusCode, b)
	}
}

// A held transfer nobody reads expires with the lease.
func TestPDMooncakeLeaseExpires(t *testing.T) {
	cfg := Config{NumBlocks: 64, BlockSize: 16}
	p := newTestEnv(t, cfg, 0, 1, ServerConfig{PD: &PDConfig{Role: PDRolePrefill, Transfer: PDTransferMooncake, Lease: 20 * time.Millisecond}})
	pkv, _ := mooncakeParams(p, "xfer-3", "e")
	if status, body := p.post(t, `{"prompt":`+idsJSON(seqTokens(1, 101))+`,"max_tokens":1,"kv_transfer_params":`+pkv+`}`); status != http.StatusOK {
		t.Fatalf("got %d %s", status, body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for usedBlocks(p.ranks[0]) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d blocks still held after the lease", usedBlocks(p.ranks[0]))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
