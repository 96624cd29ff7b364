package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procPollInterval is how often the /proc scans below repeat while they wait.
const procPollInterval = 20 * time.Millisecond

// procEntry is what the harness reads from /proc/PID/stat.
type procEntry struct {
	pid, pgid int
	state     byte
	// start is the start time in clock ticks after boot: with pid, it names one process even
	// after the pid is reused.
	start uint64
}

// gone reports whether the process has exited and only waits to be reaped (zombie or dead).
// Orphans are reaped by PID 1, which in some containers never does it; they hold no resources.
func (e procEntry) gone() bool { return e.state == 'Z' || e.state == 'X' }

// parseStat parses /proc/PID/stat: "pid (comm) state ppid pgrp session ... starttime ...".
// comm may contain spaces and parentheses, so fields are counted after the last ')'.
func parseStat(b []byte) (procEntry, bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return procEntry{}, false
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return procEntry{}, false
	}
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state), f[2] field 5 (pgrp), f[19] field 22 (starttime); see proc(5).
	if len(f) < 20 || len(f[0]) != 1 {
		return procEntry{}, false
	}
	pgid, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return procEntry{}, false
	}
	return procEntry{pid: pid, pgid: pgid, state: f[0][0], start: start}, true
}

// readStat reads one process's stat; ok is false when it is gone or unreadable.
func readStat(pid int) (procEntry, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procEntry{}, false
	}
	return parseStat(b)
}

// listProcs returns every process (thread group) in /proc except this one. Processes that exit
// during the scan are left out.
func listProcs() ([]procEntry, error) {
	des, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("harness: list processes: %w", err)
	}
	self := os.Getpid()
	out := make([]procEntry, 0, len(des))
	for _, de := range des {
		pid, err := strconv.Atoi(de.Name())
		if err != nil || pid == self {
			continue
		}
		if e, ok := readStat(pid); ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// markerOf returns the run marker in a process's environment: "" when it has none, when the
// environment cannot be read (another user's process) or when the process overwrote it (nginx
// reuses that memory for its process title).
func markerOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(runEnv+"=")); ok {
			return string(v)
		}
	}
	return ""
}

func cmdlineOf(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// survivor is a process that a harness started, directly or through its descendants, and that
// is still running when it should be gone.
type survivor struct {
	pid, pgid int
	marker    string // "" when it was found by its process group only
	cmdline   string
	start     uint64
}

func (s survivor) String() string {
	return fmt.Sprintf("pid %d (group %d, %s=%q): %s", s.pid, s.pgid, runEnv, s.marker, s.cmdline)
}

// kill sends SIGKILL to s if it is still the same process (its pid not reused since the scan).
func (s survivor) kill() {
	if e, ok := readStat(s.pid); ok && e.start == s.start {
		_ = syscall.Kill(s.pid, syscall.SIGKILL)
	}
}

// scanSurvivors lists the running processes in a group for which inGroup is true or whose
// marker is under scope.
func scanSurvivors(inGroup func(pgid int) bool, scope string) ([]survivor, error) {
	procs, err := listProcs()
	if err != nil {
		return nil, err
	}
	var out []survivor
	for _, e := range procs {
		if e.gone() {
			continue
		}
		m := markerOf(e.pid)
		if inGroup(e.pgid) || (m != "" && under(m, scope)) {
			out = append(out, survivor{pid: e.pid, pgid: e.pgid, marker: m, cmdline: cmdlineOf(e.pid), start: e.start})
		}
	}
	return out, nil
}

// awaitSurvivors repeats scanSurvivors until it finds nothing or ctx is done, and returns the
// last list (nil when none remain).
func awaitSurvivors(ctx context.Context, inGroup func(pgid int) bool, scope string) ([]survivor, error) {
	ticker := time.NewTicker(procPollInterval)
	defer ticker.Stop()
	for {
		left, err := scanSurvivors(inGroup, scope)
		if err != nil || len(left) == 0 {
			return left, err
		}
		select {
		case <-ctx.Done():
			return left, nil
		case <-ticker.C:
		}
	}
}

// checkNoSurvivors waits for the survivors of a scope to go; those left when ctx is done are
// killed, so a failing run does not leave them behind, and listed in the error.
func checkNoSurvivors(ctx context.Context, what string, inGroup func(pgid int) bool, scope string) error {
	left, err := awaitSurvivors(ctx, inGroup, scope)
	if err != nil || len(left) == 0 {
		return err
	}
	var b strings.Builder
	for _, s := range left {
		s.kill()
		fmt.Fprintf(&b, "\n  %v", s)
	}
	return fmt.Errorf("harness: %d processes started by %s still running (killed now):%s", len(left), what, b.String())
}

// CheckNoSurvivors waits until no process this run started is left, and returns an error
// listing (and kills) those still running when ctx is done. A process counts when it is in a
// process group the harness started and has not yet seen empty (a process never stopped, or
// nginx workers, whose environment nginx overwrites), or when its environment carries a marker
// of this run: every descendant of a started process that kept its environment, wherever it
// was re-parented, including the processes of a harness started by this one (tools/bench run
// by a test).
//
// Test mains and tools/bench call it last, with a deadline of a few seconds, and fail when it
// returns an error.
func CheckNoSurvivors(ctx context.Context) error {
	return checkNoSurvivors(ctx, "this run", thisRun.hasGroup, thisRun.id)
}

// CheckNoSurvivors is the package-level CheckNoSurvivors restricted to p, for use once p is
// done: the members of its process group and the processes carrying p's marker or one nested
// below it, that is p's descendants wherever they were re-parented.
func (p *Process) CheckNoSurvivors(ctx context.Context) error {
	pid := p.Pid()
	return checkNoSurvivors(ctx, p.Name, func(pgid int) bool { return pgid == pid && thisRun.hasGroup(pid) }, p.marker)
}

// groupMembers returns the running members of process group pgid.
func groupMembers(pgid int) ([]procEntry, error) {
	procs, err := listProcs()
	if err != nil {
		return nil, err
	}
	var out []procEntry
	for _, e := range procs {
		if e.pgid == pgid && !e.gone() {
			out = append(out, e)
		}
	}
	return out, nil
}

// drainGroup waits up to timeout until no member of group pgid (of the process called name)
// is running, and returns an error listing those that still are.
func drainGroup(name string, pgid int, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	ticker := time.NewTicker(procPollInterval)
	defer ticker.Stop()
	for {
		left, err := groupMembers(pgid)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-deadline.C:
			var b strings.Builder
			for _, e := range left {
				fmt.Fprintf(&b, "\n  pid %d: %s", e.pid, cmdlineOf(e.pid))
			}
			return fmt.Errorf("harness: %s: %d processes of its group still running %v after SIGKILL:%s", name, len(left), timeout, b.String())
		case <-ticker.C:
		}
	}
}
