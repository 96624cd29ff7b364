package chat

import (
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"github.com/kvgate/kvgate/pkg/openai"
)

// TestSharedSchemas renders requests with the same tools concurrently through every golden
// template that shares values (go test -race sees any write to the shared schemas), and
// checks the prompts against a renderer whose templates share nothing.
func TestSharedSchemas(t *testing.T) {
	var body []byte
	for _, c := range readConversations(t) {
		if c.ID == "bench-10msg-4k" {
			body = c.Request
		}
	}
	names, renderers := goldenRenderers(t)
	for _, name := range names {
		r := renderers[name]
		if r.defaultT == nil || !r.defaultT.shares || r.toolT != nil {
			continue
		}
		fresh := *r.defaultT
		fresh.shares = false
		want, werr := r.renderCompiled(mustParse(t, string(body)), &fresh)
		var wg sync.WaitGroup
		errs := make(chan string, 8)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					req, perr := openai.ParseChat(body, openai.Limits{})
					if perr != nil {
						errs <- perr.Message
						return
					}
					got, err := r.RenderText(req)
					if (err == nil) != (werr == nil) || got != want {
						errs <- fmt.Sprintf("goroutine %d: got %.80q, %v; want %.80q, %v", g, got, err, want, werr)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Errorf("%s: %s", name, e)
		}
	}
	// Two requests with the same schema get the same values.
	r := renderers["qwen3"]
	req := mustParse(t, string(body))
	a, _, _ := toolDicts(req.Tools, &r.schemas)
	b, _, _ := toolDicts(req.Tools, &r.schemas)
	pa, _ := a.AsList().Items[0].AsDict().Data["function"].AsDict().Get("parameters")
	pb, _ := b.AsList().Items[0].AsDict().Data["function"].AsDict().Get("parameters")
	if unsafe.Pointer(pa.AsDict()) != unsafe.Pointer(pb.AsDict()) {
		t.Errorf("the same schema decoded twice, want one shared value")
	}
}

func TestSchemaCacheBound(t *testing.T) {
	var c schemaCache
	for i := range 3 * maxSchemaEntries {
		if _, _, err := c.decode(fmt.Appendf(nil, `{"n": %d}`, i)); err != nil {
			t.Fatal(err)
		}
		if len(c.vals) > maxSchemaEntries || c.bytes > maxSchemaBytes {
			t.Fatalf("after %d schemas: %d entries, %d bytes", i+1, len(c.vals), c.bytes)
		}
	}
	if _, _, err := c.decode([]byte(`{"n": `)); err == nil {
		t.Errorf("invalid JSON decoded")
	}
}
