package harness

import (
	"bytes"
	"context"
	"errors"
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

// Survivor is a process that a harness started, directly or through its descendants, and that
// is still running when it should be gone.
type Survivor struct {
	Pid, Pgid int
	// Marker is its run marker, "" when it was found by its process group only.
	Marker string
	// Cmdline is its command line, arguments separated by spaces.
	Cmdline string

	start uint64
}

// String describes s for a failure message.
func (s Survivor) String() string {
	return fmt.Sprintf("pid %d (group %d, %s=%q): %s", s.Pid, s.Pgid, runEnv, s.Marker, s.Cmdline)
}

// Kill sends SIGKILL to s if it is still the same process (its pid not reused since the scan).
func (s Survivor) Kill() error {
	if e, ok := readStat(s.Pid); !ok || e.start != s.start {
		return nil
	}
	if err := syscall.Kill(s.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("harness: kill survivor %d: %w", s.Pid, err)
	}
	return nil
}

// scanSurvivors lists the running processes in a group for which inGroup is true or whose
// marker is under scope.
func scanSurvivors(inGroup func(pgid int) bool, scope string) ([]Survivor, error) {
	procs, err := listProcs()
	if err != nil {
		return nil, err
	}
	var out []Survivor
	for _, e := range procs {
		if e.gone() {
			continue
		}
		m := markerOf(e.pid)
		if inGroup(e.pgid) || (m != "" && under(m, scope)) {
			out = append(out, Survivor{Pid: e.pid, Pgid: e.pgid, Marker: m, Cmdline: cmdlineOf(e.pid), start: e.start})
		}
	}
	return out, nil
}

// awaitSurvivors repeats scanSurvivors until it finds nothing or ctx is done, and returns the
// last list (nil when none remain).
func awaitSurvivors(ctx context.Context, inGroup func(pgid int) bool, scope string) ([]Survivor, error) {
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

// Survivors waits until no process this run started is left, and returns those still running
// when ctx is done (nil when none remain). A process counts when it is in a process group the
// harness started and has not yet seen empty (a process not stopped yet, or nginx workers,
// whose environment nginx overwrites), or when its environment carries a marker of this run:
// every descendant of a started process that kept its environment, wherever it was re-parented,
// including the processes of a harness started by this one (tools/bench run by a test).
//
// Test mains call it last, bounded by a few seconds, and fail when it returns any.
func Survivors(ctx context.Context) ([]Survivor, error) {
	return awaitSurvivors(ctx, thisRun.hasGroup, thisRun.id)
}

// Survivors is the package-level Survivors restricted to p: the members of its process group
// (p itself until it exits) and the processes carrying p's marker or one nested below it, that
// is p's descendants wherever they were re-parented.
func (p *Process) Survivors(ctx context.Context) ([]Survivor, error) {
	pid := p.Pid()
	return awaitSurvivors(ctx, func(pgid int) bool { return pgid == pid && thisRun.hasGroup(pid) }, p.marker)
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
