package sim

import (
	"testing"
	"time"
)

// BenchmarkCoreDecodeStep measures one Schedule+Finish+TakeEvents of a 256-sequence decode
// batch (the engine loop's per-step work, without delivery).
func BenchmarkCoreDecodeStep(b *testing.B) {
	c, err := newCore(Config{})
	if err != nil {
		b.Fatal(err)
	}
	var now time.Duration
	for i := range 256 {
		r := &Request{ID: "b", Prompt: seqTokens(uint32(i)*2000, 1050), MaxTokens: 1 << 14, Seed: uint64(i)}
		if err := c.Add(r, now); err != nil {
			b.Fatal(err)
		}
	}
	for c.NumWaiting() > 0 { // prefill everything first
		d, _ := c.Schedule(now)
		now += d
		c.Finish(now)
		c.TakeEvents()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		d, ok := c.Schedule(now)
		if !ok {
			b.Fatal("nothing to run")
		}
		now += d
		c.Finish(now)
		c.TakeEvents()
	}
}

// BenchmarkPrepareHashes hashes a 1050-token prompt (65 SHA-256 blocks).
func BenchmarkPrepareHashes(b *testing.B) {
	prompt := seqTokens(7, 1050)
	cfg := DefaultConfig()
	var h hasher
	b.ReportAllocs()
	for range b.N {
		r := &Request{Prompt: prompt, MaxTokens: 128}
		prepareHashes(r, cfg, &h)
	}
}
