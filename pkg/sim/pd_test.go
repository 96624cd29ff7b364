package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/internal/testutil"
)

// Prefill/decode roles (pd.go; wire/pd.md §7).

func TestCoreRemoteTokensSkipPrefill(t *testing.T) {
	for _, remote := range []int{0, 1050, 5000} {
		t.Run(fmt.Sprint("remote=", remote), func(t *testing.T) {
			c := mustCore(t, Config{})
			r := newReq("a", seqTokens(1000, 1050), 4)
			r.RemoteTokens = remote
			drive(t, c, []arrival{{0, r}})
			cfg := c.Config()
			computed := 1050 - min(remote, 1049) // the last prompt token is always computed
			if want := cfg.StepOverhead + time.Duration(computed)*cfg.PrefillPerToken + cfg.DecodePerSeq; ttft(r) != want {
				t.Errorf("TTFT: got %v, want %v (%d tokens computed)", ttft(r), want, computed)
			}
			if got := c.Cache().NumCached(); got != 1050/cfg.BlockSize {
				t.Errorf("cached blocks: got %d, want %d (transferred blocks are cached like computed ones)", got, 1050/cfg.BlockSize)
			}
		})
	}
}

func TestCoreHoldKV(t *testing.T) {
	c := mustCore(t, Config{})
	r := newReq("a", seqTokens(0, 100), 1)
	r.HoldKV = true
	drive(t, c, []arrival{{0, r}})
	if got, want := c.Cache().NumUsed(), 7; got != want {
		t.Fatalf("blocks in use after a held finish: got %d, want %d", got, want)
	}
	if !c.ReleaseHeld(r) || c.Cache().NumUsed() != 0 || c.ReleaseHeld(r) {
		t.Errorf("ReleaseHeld: blocks still used %d, or a second release did something", c.Cache().NumUsed())
	}
}

// pdTrio starts a prefill server, a decode server and an aggregated one, with one small
// engine each.
func pdTrio(t *testing.T, transfer string, wait time.Duration) (p, d, agg *testEnv) {
	cfg := Config{NumBlocks: 512, BlockSize: 16}
	p = newTestEnv(t, cfg, 0, 1, ServerConfig{PD: &PDConfig{Role: PDRolePrefill, Transfer: transfer, Wait: wait}})
	d = newTestEnv(t, cfg, 0, 1, ServerConfig{PD: &PDConfig{Role: PDRoleDecode, Transfer: transfer, Wait: wait}})
	agg = newTestEnv(t, cfg, 0, 1, ServerConfig{})
	return p, d, agg
}

func usedBlocks(e *Engine) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.Cache().NumUsed()
}

func storedTokens(s *recordingSink) int {
	n := 0
	for _, e := range s.events() {
		if e.Kind == "stored" {
			n += len(e.Tokens)
		}
	}
	return n
}

func TestPDNIXLPair(t *testing.T) {
	p, d, agg := pdTrio(t, PDTransferNIXL, 0)
	ids := idsJSON(seqTokens(1, 101))
	status, body := p.post(t, `{"prompt":`+ids+`,"max_tokens":1,"stream":false,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}}`)
	if status != http.StatusOK {
		t.Fatalf("prefill: %d %s", status, body)
	}
	var pr struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		KV map[string]any `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &pr); err != nil || pr.KV == nil {
		t.Fatalf("prefill answer %s has no kv_transfer_params (%v)", body, err)
	}
	u, _ := url.Parse(p.srv.URL)
	if pr.KV["do_remote_prefill"] != true || pr.KV["remote_host"] != u.Hostname() || fmt.Sprint(pr.KV["remote_port"]) != u.Port() ||
		len(pr.KV["remote_block_ids"].([]any)[0].([]any)) != 7 || pr.KV["remote_request_id"] == "" || pr.Choices[0].FinishReason != "length" {
		t.Errorf("prefill kv_transfer_params %v: want do_remote_prefill, this server's side channel, 7 held blocks, a request id", pr.KV)
	}
	if got := usedBlocks(p.ranks[0]); got != 7 {
		t.Errorf("prefill holds %d blocks, want 7 until the decode server reads them", got)
	}
	kv, _ := json.Marshal(pr.KV)
	req := `{"prompt":` + ids + `,"max_tokens":8,"return_token_ids":true%s}`
	status, dbody := d.post(t, fmt.Sprintf(req, `,"kv_transfer_params":`+string(kv)))
	_, abody := agg.post(t, fmt.Sprintf(req, ""))
	if status != http.StatusOK {
		t.Fatalf("decode: %d %s", status, dbody)
	}
	var dr, ar completionResp
	_ = json.Unmarshal(dbody, &dr)
	_ = json.Unmarshal(abody, &ar)
	if diff := cmp.Diff(ar.Choices, dr.Choices); diff != "" || len(dr.Choices) == 0 {
		t.Errorf("decode answer differs from the aggregated one (-agg +decode):\n%s", diff)
	}
	if got := usedBlocks(p.ranks[0]); got != 0 {
		t.Errorf("prefill still holds %d blocks after the read", got)
	}
	if got := storedTokens(d.sink); got != 96 {
		t.Errorf("decode server stored %d tokens' blocks, want the prompt's 6 full blocks (96 tokens)", got)
	}
	// The read released the lease: a second decode with the same params cannot transfer.
	if status, body := d.post(t, fmt.Sprintf(req, `,"kv_transfer_params":`+string(kv))); status != http.StatusInternalServerError || !strings.Contains(string(body), "KV transfer failed") {
		t.Errorf("second read: got %d %s, want 500 KV transfer failed", status, body)
	}
}

func TestPDNIXLPrefillReleasesWithoutHandoff(t *testing.T) {
	p, _, _ := pdTrio(t, PDTransferNIXL, 0)
	ids := idsJSON(seqTokens(1, 101))
	// Streaming prefill: no params in chunks, blocks freed at once.
	if status, body := p.post(t, `{"prompt":`+ids+`,"max_tokens":1,"stream":true,"kv_transfer_params":{"do_remote_decode":true}}`); status != http.StatusOK || strings.Contains(string(body), "kv_transfer_params") {
		t.Errorf("got %d %s", status, body)
	}
	if got := usedBlocks(p.ranks[0]); got != 0 {
		t.Errorf("prefill holds %d blocks after a streamed answer, want 0", got)
	}
	// No do_remote_decode: an ordinary request.
	if status, body := p.post(t, `{"prompt":`+ids+`,"max_tokens":2}`); status != http.StatusOK || strings.Contains(string(body), "kv_transfer_params") {
		t.Errorf("got %d %s", status, body)
	}
}

func TestPDNIXLLeaseExpires(t *testing.T) {
	cfg := Config{NumBlocks: 64, BlockSize: 16}
	p := newTestEnv(t, cfg, 0, 1, ServerConfig{PD: &PDConfig{Role: PDRolePrefill, Transfer: PDTransferNIXL, Lease: 20 * time.Millisecond}})
	if status, body := p.post(t, `{"prompt":`+idsJSON(seqTokens(1, 101))+`,"max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}}`); status != http.StatusOK {
		t.Fatalf("got %d %s", status, body)
	}
	testutil.WaitFor(t, "the lease to expire", func() bool { return usedBlocks(p.ranks[0]) == 0 })
}

func postAsync(t *testing.T, env *testEnv, body string) chan [2]any {
	out := make(chan [2]any, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, env.srv.URL+"/v1/completions", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- [2]any{0, err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out <- [2]any{resp.StatusCode, string(b)}
	}()
	return out
}

func TestPDSGLangPair(t *testing.T) {
	p, d, agg := pdTrio(t, PDTransferSGLang, 0)
	u, _ := url.Parse(p.boot.URL)
	ids := idsJSON(seqTokens(1, 101))
	body := fmt.Sprintf(`{"prompt":%s,"max_tokens":8,"return_token_ids":true,"bootstrap_host":%q,"bootstrap_port":%s,"bootstrap_room":%d}`, ids, u.Hostname(), u.Port(), uint64(1)<<62+7)
	pc, dc := postAsync(t, p, body), postAsync(t, d, body)
	pres, dres := <-pc, <-dc
	if pres[0] != http.StatusOK || dres[0] != http.StatusOK {
		t.Fatalf("prefill %v, decode %v", pres, dres)
	}
	var pr, dr, ar completionResp
	_ = json.Unmarshal([]byte(pres[1].(string)), &pr)
	_ = json.Unmarshal([]byte(dres[1].(string)), &dr)
	_, abody := agg.post(t, fmt.Sprintf(`{"prompt":%s,"max_tokens":8,"return_token_ids":true}`, ids))
	_ = json.Unmarshal(abody, &ar)
	if len(pr.Choices) != 1 || len(pr.Choices[0].TokenIDs) != 1 || *pr.Choices[0].FinishReason != "length" {
		t.Errorf("prefill answer %v, want one token, finish length", pres[1])
	}
	if diff := cmp.Diff(ar.Choices, dr.Choices); diff != "" || len(dr.Choices) == 0 {
		t.Errorf("decode answer differs from the aggregated one (-agg +decode):\n%s", diff)
	}
	if got := storedTokens(d.sink); got != 96 {
		t.Errorf("decode server stored %d tokens' blocks, want 96", got)
	}
}

func TestPDSGLangBounds(t *testing.T) {
	p, d, _ := pdTrio(t, PDTransferSGLang, 50*time.Millisecond)
	ids := idsJSON(seqTokens(1, 101))
	if status, body := p.post(t, `{"prompt":`+ids+`}`); status != http.StatusBadRequest || !strings.Contains(string(body), "bootstrap_room") {
		t.Errorf("prefill without a room: got %d %s, want 400", status, body)
	}
	// A prefill whose decode server never comes, and a decode whose prefill never comes, end
	// within the wait bound.
	if status, body := p.post(t, `{"prompt":`+ids+`,"bootstrap_room":9}`); status != http.StatusInternalServerError || !strings.Contains(string(body), "bootstrap timeout") {
		t.Errorf("lonely prefill: got %d %s", status, body)
	}
	u, _ := url.Parse(p.boot.URL)
	body := fmt.Sprintf(`{"prompt":%s,"bootstrap_host":%q,"bootstrap_port":%s,"bootstrap_room":10}`, ids, u.Hostname(), u.Port())
	if status, out := d.post(t, body); status != http.StatusInternalServerError || !strings.Contains(string(out), "KV transfer failed") {
		t.Errorf("lonely decode: got %d %s", status, out)
	}
}

// tokenTimes drives c like drive, with a arriving at 0 and b at bAt, and returns the
// simulated times at which a received its output tokens.
func tokenTimes(t *testing.T, c *core, a, b *Request, bAt time.Duration) []time.Duration {
	t.Helper()
	if err := c.Add(a, 0); err != nil {
		t.Fatal(err)
	}
	var now time.Duration
	var times []time.Duration
	added := false
	for steps := 0; steps < 100_000; steps++ {
		if !added && now >= bAt {
			if err := c.Add(b, bAt); err != nil {
				t.Fatal(err)
			}
			added = true
		}
		d, ok := c.Schedule(now)
		if !ok {
			if added {
				return times
			}
			now = bAt
			continue
		}
		now += d
		for _, r := range c.Finish(now) {
			if r == a {
				times = append(times, now)
			}
		}
	}
	t.Fatal("tokenTimes: no progress")
	return nil
}

// TestCorePrefillStallsDecode is the latency model P/D removes: on an aggregated engine a
// 2k-token prompt arriving while another request decodes is prefilled inside the decode
// steps (chunked prefill), so the decoding request waits the prefill's compute between two
// tokens; on a decode engine the same prompt's KV arrives by transfer and only its last token
// is computed, so the decoding request's token gaps stay a decode step's.
func TestCorePrefillStallsDecode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remote int
	}{{"aggregated", 0}, {"decode", 2047}} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCore(t, Config{})
			cfg := c.Config()
			a := newReq("decoding", seqTokens(1, 100), 40)
			b := newReq("long", seqTokens(50000, 2048), 4)
			b.RemoteTokens = tc.remote
			times := tokenTimes(t, c, a, b, 300*time.Millisecond)
			var most time.Duration
			for i := 1; i < len(times); i++ {
				most = max(most, times[i]-times[i-1])
			}
			step := cfg.StepOverhead + 2*cfg.DecodePerSeq // a decode step beside the other request
			stall := step + 2048*cfg.PrefillPerToken
			if tc.remote == 0 && most < stall {
				t.Errorf("aggregated: longest gap between tokens %v, want at least %v (the 2k prefill inside a decode step)", most, stall)
			}
			if tc.remote > 0 && most > step+cfg.PrefillPerToken {
				t.Errorf("decode engine: longest gap between tokens %v, want at most %v (only the last prompt token computed)", most, step+cfg.PrefillPerToken)
			}
		})
	}
}
