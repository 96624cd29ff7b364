package harness

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// runEnv names the environment variable that marks every process the harness starts (doc.go).
const runEnv = "KVGATE_TEST_RUN"

// run is this process's identity as a harness: the prefix of the markers its children carry,
// and the process groups it started that are not yet known to be empty. It must not be copied.
type run struct {
	// id is "<pid>-<random>", below the marker this process was started with, if any:
	// "<parent run id>/<n>/<pid>-<random>". Children get id + "/<n>".
	id  string
	seq atomic.Uint64

	// mu guards groups: the ids of process groups this process started whose members were not
	// yet seen gone. A group leaves the set only once it is empty, so an id in the set cannot
	// have been reused by an unrelated group.
	mu     sync.Mutex
	groups map[int]bool
}

// thisRun is created once, when the package is initialised, and never replaced: the marker
// must be the same for every child of this process.
var thisRun = newRun(os.Getenv(runEnv), os.Getpid())

func newRun(parent string, pid int) *run {
	// The random part keeps ids unique across runs (pids repeat) and between sibling test
	// binaries started by one go test with the variable already set.
	id := fmt.Sprintf("%d-%08x", pid, rand.Uint32())
	if parent != "" {
		id = parent + "/" + id
	}
	return &run{id: id, groups: map[int]bool{}}
}

// childMarker returns the marker for the next child: unique within the run, and below the run's
// id so a prefix test finds every process started under it.
func (r *run) childMarker() string { return fmt.Sprintf("%s/%d", r.id, r.seq.Add(1)) }

func (r *run) addGroup(pgid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups[pgid] = true
}

func (r *run) removeGroup(pgid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.groups, pgid)
}

func (r *run) hasGroup(pgid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.groups[pgid]
}

// under reports whether marker belongs to scope: scope itself or any marker nested below it.
func under(marker, scope string) bool {
	return marker == scope || strings.HasPrefix(marker, scope+"/")
}
