//go:build e2e || reliability

package reliability

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/fleetpub"
)

// TestScaleFaults (issue 28): a gateway following a fleet of event-fed engines while one
// publisher in ten flaps and then every publisher goes away at once and comes back (a
// partition healing: every subscriber reconnects together). Routing must not stall (every
// completion answered, lookup latency held), every stream must be up again soon after, each
// loss must be counted, and memory, goroutines and descriptors must not grow.
func TestScaleFaults(t *testing.T) {
	o := fleetpub.DefaultOptions()
	// The engines' replay buffers hold every outage of the phase but not the whole run: the
	// family prefixes every chain continues were stored before the buffer's oldest batch.
	o.Workers, o.Blocks, o.History = scaleFaultWorkers, scaleFaultBlocks, scaleFaultHistory
	o.Duration, o.Idle = scaleFaultSteady, 2*time.Second
	o.Bin, o.Tokenizer, o.LogDir = filepath.Dir(bins.Gateway), tokenizerPath, t.TempDir()
	o.Faults.Duration = scaleFaultDuration
	o.Faults.PartitionAt, o.Faults.PartitionFor = scaleFaultDuration/3, scaleFaultDuration/4
	o.Faults.RecoverWithin = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := fleetpub.Run(ctx, o, os.Stdout)
	if err != nil {
		t.Fatal(err) // includes any failed completion, in either phase
	}
	s, f := rep.Steady, rep.Faults
	report(t, "scale_faults", "workers", o.Workers, "flapping", f.Flapping, "partition_ms", ms(o.Faults.PartitionFor),
		"steady_cores", round3(s.Cores), "fault_cores", round3(f.Cores),
		"steady_lookup_p99_us", round3(s.LookupP99us), "fault_lookup_p99_us", round3(f.LookupP99us),
		"fault_completion_p99_ms", round3(f.CompletionP99ms), "completions", f.Completions, "failed", f.Failed,
		"min_streams_up", f.MinStreamsUp, "recovered_ms", ms(f.RecoveredIn), "gaps", f.Gaps, "replays", f.Replays, "resets", f.Resets,
		"steady_memberships", s.Memberships, "fault_memberships", f.Memberships,
		"heap_growth_mib", round3(f.HeapGrowthMiB), "goroutine_growth", f.GoroutineGrowth, "fd_growth", f.FDGrowth)

	// The faults happened: the partition took (nearly) every stream down at once, and each
	// flapping engine lost messages the gateway saw as gaps.
	if f.MinStreamsUp > float64(o.Workers)/2 {
		t.Errorf("during the partition at least %.0f of %d streams stayed up: the partition did not happen", f.MinStreamsUp, o.Workers)
	}
	if f.Flapping == 0 || f.Ups < o.Workers+f.Flapping {
		t.Errorf("%d engines flapped, %d links came back: want flapping engines and at least one return each plus the partition's", f.Flapping, f.Ups)
	}
	// Each outage lost batches. On reconnecting, the gateway asks each engine for its batches
	// from the cursor on; the engine still has the batch at the cursor, so the gateway knows
	// it is the same instance and repairs the gap without dropping the worker's blocks (a
	// rebuild from the buffer would lose the prefixes stored before it, and every chain on
	// them: the index would be empty). Afterwards the index holds what it held before.
	if f.Replays < 0.9*float64(f.Downs) {
		t.Errorf("%d links went down and came back: the gateway sent %.0f replay requests, want one per reconnection", f.Downs, f.Replays)
	}
	// Every outage is within the engines' buffers, so no worker should be reset; on a loaded
	// 2-core machine a few of hundreds of simultaneous replays can pass their deadline
	// (512 engines at load 22: 39 of 715), which resets those workers.
	if f.Resets > 0.1*float64(f.Downs) {
		t.Errorf("%.0f workers were reset for %d reconnections (%v): every outage was within the engines' replay buffers", f.Resets, f.Downs, f.ByReason)
	}
	if f.Memberships < 0.9*s.Memberships {
		t.Errorf("the index holds %.0f (worker, block) pairs after the faults, %.0f before", f.Memberships, s.Memberships)
	}
	// Routing did not stall: every completion answered (Run fails otherwise), and the lookup
	// p99 stayed within a bound of the steady state's (the bound is loose: a shared machine).
	if f.Completions == 0 {
		t.Error("no completion was sent during the fault phase")
	}
	if lim := 4*s.LookupP99us + 2000; f.LookupP99us > lim {
		t.Errorf("lookup p99 during the faults %.0f µs, steady %.0f µs: over the bound %.0f µs", f.LookupP99us, s.LookupP99us, lim)
	}
	// Recovered, bounded, and nothing leaked.
	if f.RecoveredIn > 10*time.Second {
		t.Errorf("every stream up only %s after the publishers came back", f.RecoveredIn)
	}
	if lim := 2*s.Cores + 0.2; f.Cores > lim {
		t.Errorf("gateway CPU during the faults %.2f cores, steady %.2f: over the bound %.2f", f.Cores, s.Cores, lim)
	}
	if lim := 0.1*s.HeapMiB + 16; f.HeapGrowthMiB > lim {
		t.Errorf("live heap grew %.1f MiB during the faults (steady index heap %.0f MiB): over %.1f", f.HeapGrowthMiB, s.HeapMiB, lim)
	}
	if f.GoroutineGrowth > 16 || f.FDGrowth > 16 {
		t.Errorf("goroutines %+.0f, descriptors %+.0f after the faults: a leak per reconnect", f.GoroutineGrowth, f.FDGrowth)
	}
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }
