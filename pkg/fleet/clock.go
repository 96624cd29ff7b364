package fleet

import "time"

// Instants the fleet keeps in atomics (when Run started, when a worker went down or began
// draining) are stored as nanoseconds after the fleet's epoch, a reading of its clock taken
// in New, and never as unix nanoseconds: time.Unix drops the monotonic reading, so a
// comparison with Now would use the wall clock, and a wall clock stepped forward (NTP settling
// on a freshly booted machine) would end readiness's wait, or forget a worker's cache, early.
// The stored value is at least 1, so 0 (and -1) stay free for "not set" (and "forgotten").

// stamp returns t as a value to store.
func (f *Fleet) stamp(t time.Time) int64 { return max(int64(t.Sub(f.epoch)), 0) + 1 }

// instant returns the time a stamp was taken at, with the epoch's monotonic reading.
func (f *Fleet) instant(s int64) time.Time { return f.epoch.Add(time.Duration(s - 1)) }
