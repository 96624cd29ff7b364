package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// A stored instant keeps the clock's monotonic reading, so readiness's wait and the
// down-for-an-interval rule measure elapsed time, not the wall clock, which NTP may step.
// (time.Time's String prints the monotonic reading as "m=±secs" when the value has one.)
func TestStampsKeepTheMonotonicClock(t *testing.T) {
	idx, err := indexer.New(indexer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(Config{}, []PoolConfig{{Name: "m", Index: idx}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	s := f.stamp(now)
	if s < 1 {
		t.Fatalf("stamp %d, want at least 1 (0 and -1 mean unset and forgotten)", s)
	}
	got := f.instant(s)
	if !strings.Contains(got.String(), " m=") {
		t.Errorf("instant %v has no monotonic reading", got)
	}
	if d := got.Sub(now); d != 0 {
		t.Errorf("instant is %v off the stamped time", d)
	}
	if s := f.stamp(f.epoch.Add(-time.Hour)); s != 1 {
		t.Errorf("stamp of a time before the epoch: %d, want 1", s)
	}
}
