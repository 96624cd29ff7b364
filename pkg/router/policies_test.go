package router

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
)

// blockingWorker holds every completion until release is closed, so tests can give a worker
// in-flight load.
func blockingWorker(t *testing.T, release chan struct{}) *fakeWorker {
	fw := newFakeWorker(t, "m")
	fw.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.Write([]byte(`{}`))
	}
	return fw
}

// occupy starts n requests through g that the blocking worker holds; it returns once the worker
// has received them all.
func occupy(t *testing.T, g *testGateway, fw *fakeWorker, body string, n int, done chan<- struct{}) {
	for i := 0; i < n; i++ {
		go func() {
			resp, err := g.srv.Client().Post(g.srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err == nil {
				resp.Body.Close()
			}
			done <- struct{}{}
		}()
		fw.nextReq(t)
	}
}

// swapPolicy delegates to a policy the test can replace while the router runs.
type swapPolicy struct{ p atomic.Pointer[policy.Policy] }

func (s *swapPolicy) set(p policy.Policy) { s.p.Store(&p) }
func (s *swapPolicy) Pick(r *policy.Request, c []policy.Candidate) policy.Decision {
	return (*s.p.Load()).Pick(r, c)
}

func newPolicy(t *testing.T, name string, cfg policy.Config) policy.Policy {
	t.Helper()
	p, err := policy.New(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPoliciesThroughRouter(t *testing.T) {
	t.Run("round_robin alternates", func(t *testing.T) {
		a, b := newFakeWorker(t, "m"), newFakeWorker(t, "m")
		g := newTestGateway(t, testConfig{Policy: newPolicy(t, policy.NameRoundRobin, policy.DefaultConfig())}, a.url(), b.url())
		var got []string
		for i := 0; i < 4; i++ {
			r, _ := g.post(t, `{"prompt":"same prompt every time"}`)
			got = append(got, r.Header.Get(pipeline.HeaderWorker))
			if reason := r.Header.Get(pipeline.HeaderReason); reason != "round_robin" {
				t.Errorf("reason: got %q, want round_robin", reason)
			}
		}
		if got[0] == got[1] || got[0] != got[2] || got[1] != got[3] {
			t.Errorf("round robin order: got %v", got)
		}
	})
	t.Run("prefix_hash is sticky per prefix", func(t *testing.T) {
		a, b := newFakeWorker(t, "m"), newFakeWorker(t, "m")
		g := newTestGateway(t, testConfig{Policy: newPolicy(t, policy.NamePrefixHash, policy.DefaultConfig())}, a.url(), b.url())
		seen := map[string]string{}
		for i := 0; i < 6; i++ {
			prefix := strings.Repeat(string(rune('a'+i%3)), 32)
			r, _ := g.post(t, `{"prompt":"`+prefix+`suffix`+string(rune('0'+i))+`"}`)
			w := r.Header.Get(pipeline.HeaderWorker)
			if prev, ok := seen[prefix]; ok && prev != w {
				t.Errorf("prefix %q: went to %q then %q", prefix[:4], prev, w)
			}
			seen[prefix] = w
		}
	})
	t.Run("least_load avoids the busy worker", func(t *testing.T) {
		release := make(chan struct{})
		busy := blockingWorker(t, release)
		idle := newFakeWorker(t, "m")
		sp := &swapPolicy{}
		sp.set(&fixedPolicy{})
		g := newTestGateway(t, testConfig{Policy: sp}, busy.url(), idle.url())
		done := make(chan struct{}, 2)
		occupy(t, g, busy, `{"prompt":"busy"}`, 2, done) // the fixed policy sends both to the first worker
		sp.set(newPolicy(t, policy.NameLeastLoad, policy.DefaultConfig()))
		r, _ := g.post(t, `{"prompt":"x"}`)
		if got := r.Header.Get(pipeline.HeaderWorker); got != idle.url() {
			t.Errorf("least_load: got %q, want the idle worker", got)
		}
		close(release)
		<-done
		<-done
	})
	// SMG's cascade (no bound): the imbalance guard beats the cache. With the bound on, the
	// guard yields to it: the hit is given up only by a holder over the bound (the tight bound
	// here: ⌈1 × 3 / 2⌉ + 0 = 2) that also has balance_abs_threshold (1) prompts still to
	// prefill (no join grace), and the fallback is named imbalance.
	for _, v := range []struct {
		name          string
		factor, slack float64
	}{{"SMG", 0, 0}, {"bounded, holder over the bound", 1, 0}} {
		t.Run("cache_aware imbalance guard beats the cache: "+v.name, func(t *testing.T) {
			release := make(chan struct{})
			warm := blockingWorker(t, release)
			cold := newFakeWorker(t, "m")
			cfg := policy.DefaultConfig()
			cfg.BalanceAbsThreshold, cfg.BalanceRelThreshold = 1, 1.5
			cfg.BoundedLoadFactor, cfg.BoundedLoadSlack = v.factor, int64(v.slack)
			sp := &swapPolicy{}
			sp.set(&fixedPolicy{})
			g := newTestGateway(t, testConfig{Policy: sp}, warm.url(), cold.url())
			prompt := `{"prompt":"` + strings.Repeat("w", 64) + `"}`
			done := make(chan struct{}, 2)
			// Two requests of the prompt held by the warm worker: the tree places the prompt
			// there and the worker carries a load of 2.
			occupy(t, g, warm, prompt, 2, done)
			sp.set(newPolicy(t, policy.NameCacheAware, cfg))
			r, _ := g.post(t, prompt)
			if got, reason := r.Header.Get(pipeline.HeaderWorker), r.Header.Get(pipeline.HeaderReason); got != cold.url() || reason != "imbalance" {
				t.Errorf("got %q (%s), want the cold worker by imbalance", got, reason)
			}
			close(release)
			<-done
			<-done
		})
	}
}
