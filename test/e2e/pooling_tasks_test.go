//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/internal/harness"
)

// TestPoolingTasks: /pooling, /classify, /score and /v1/score go through the gateway binary to
// a simulator and come back as the simulator answers them directly (all but the per-request
// id), with the gateway's routing headers naming that simulator; a request the engine rejects
// comes back with the engine's 400.
func TestPoolingTasks(t *testing.T) {
	l := newLauncher(t)
	a := startSim(t, l, harness.SimOptions{Name: "task-0", Events: true})
	b := startSim(t, l, harness.SimOptions{Name: "task-1", Events: true})
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: []string{a.WorkerSpec(true), b.WorkerSpec(true)}})
	sims := map[string]bool{a.URL: true, b.URL: true}
	cases := []struct {
		path, body, idPrefix string
		items                int
	}{
		{"/pooling", `{"model":"` + testModel + `","input":["The capital of France is Paris.","Jupiter is a gas giant."]}`, "pooling-", 2},
		{"/pooling", `{"model":"` + testModel + `","input":[[1,2,3,4]],"task":"token_embed"}`, "pooling-", 1},
		{"/pooling", `{"model":"` + testModel + `","messages":[{"role":"user","content":"Embed this chat."}],"encoding_format":"base64"}`, "pooling-", 1},
		{"/classify", `{"model":"` + testModel + `","input":["I loved it","awful","fine I guess"]}`, "classify-", 3},
		{"/classify", `{"model":"` + testModel + `","messages":[{"role":"user","content":"awful"}],"use_activation":false}`, "classify-", 1},
		{"/score", `{"model":"` + testModel + `","queries":"capital of France","documents":["capital of France: Paris","Jupiter is the largest planet"]}`, "score-", 2},
		{"/v1/score", `{"model":"` + testModel + `","text_1":["capital of France","largest planet"],"text_2":["Berlin","Jupiter is the largest planet"]}`, "score-", 2},
		{"/v1/score", `{"model":"` + testModel + `","data_1":"largest planet","data_2":"Jupiter is the largest planet"}`, "score-", 1},
	}
	for _, c := range cases {
		code, h, viaGW := post(t, gw.URL+c.path, c.body)
		worker := h.Get("X-Kvgate-Worker")
		if code != 200 || !sims[worker] || h.Get("X-Kvgate-Route-Reason") == "" || h.Get("X-Kvgate-Matched-Blocks") != "0" {
			t.Errorf("%s %s: %d, worker %q, reason %q, matched %q: %s", c.path, c.body, code, worker, h.Get("X-Kvgate-Route-Reason"), h.Get("X-Kvgate-Matched-Blocks"), viaGW)
			continue
		}
		code, _, direct := post(t, worker+c.path, c.body)
		if code != 200 {
			t.Fatalf("%s directly: %d %s", c.path, code, direct)
		}
		g, d := withoutID(t, viaGW, c.idPrefix), withoutID(t, direct, c.idPrefix)
		if diff := cmp.Diff(d, g); diff != "" {
			t.Errorf("%s %s: through the gateway differs from the simulator's answer (-direct +gateway):\n%s", c.path, c.body, diff)
		}
		if data, _ := g["data"].([]any); len(data) != c.items || g["model"] != testModel || g["object"] != "list" {
			t.Errorf("%s %s: %d items, model %v, object %v; want %d, %s, list", c.path, c.body, len(data), g["model"], g["object"], c.items, testModel)
		}
	}
	bad := `{"model":"` + testModel + `","queries":["a","b"],"documents":["a","b","c"]}`
	code, _, viaGW := post(t, gw.URL+"/score", bad)
	_, _, direct := post(t, a.URL+"/score", bad)
	if code != 400 || string(viaGW) != string(direct) || !strings.Contains(string(viaGW), "1:1, 1:N or N:N") {
		t.Errorf("unpaired score: %d %s, want the engine's 400 %s", code, viaGW, direct)
	}
}

// post sends body and answers the status, headers and body.
func post(t *testing.T, url, body string) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, b
}

// withoutID decodes a pooling answer and drops its id (one per request) after checking its
// prefix.
func withoutID(t *testing.T, body []byte, prefix string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if id, _ := m["id"].(string); !strings.HasPrefix(id, prefix) {
		t.Errorf("id %q, want the prefix %s", id, prefix)
	}
	delete(m, "id")
	return m
}
