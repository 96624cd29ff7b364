package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseStat(t *testing.T) {
	// Fields 6 to 21, then starttime (22), then two more.
	tail := " 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 987654 23 24\n"
	for _, tc := range []struct {
		line string
		want procEntry
		ok   bool
	}{
		{"42 (nginx) S 1 40" + tail, procEntry{pid: 42, pgid: 40, state: 'S', start: 987654}, true},
		// comm may hold spaces and parentheses.
		{"7 (a) b (c) Z 1 7" + tail, procEntry{pid: 7, pgid: 7, state: 'Z', start: 987654}, true},
		{"7 nocomm S 1 7" + tail, procEntry{}, false},
		{"7 (short) S 1 7\n", procEntry{}, false},
	} {
		got, ok := parseStat([]byte(tc.line))
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseStat(%q): got %+v %v, want %+v %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
	self, ok := readStat(os.Getpid())
	if !ok || self.pid != os.Getpid() || self.pgid != syscall.Getpgrp() || self.state != 'R' && self.state != 'S' || self.start == 0 {
		t.Errorf("readStat(self): got %+v %v, want this process, running, in group %d", self, ok, syscall.Getpgrp())
	}
}

func TestUnder(t *testing.T) {
	for _, tc := range []struct {
		marker string
		want   bool
	}{{"r", true}, {"r/1", true}, {"r/1/9-ab/2", true}, {"r1", false}, {"q/r", false}, {"", false}} {
		if got := under(tc.marker, "r"); got != tc.want {
			t.Errorf("under(%q, r): got %v, want %v", tc.marker, got, tc.want)
		}
	}
}

func TestNewRunNestsBelowParentMarker(t *testing.T) {
	r := newRun("", 12)
	if !regexp.MustCompile(`^12-[0-9a-f]{8}$`).MatchString(r.id) {
		t.Errorf("top-level id: got %q, want 12-<8 hex digits>", r.id)
	}
	nested := newRun(r.childMarker(), 34)
	if !under(nested.id, r.id) || !strings.HasPrefix(nested.id, r.id+"/1/34-") {
		t.Errorf("nested id: got %q, want %s/1/34-<random>", nested.id, r.id)
	}
	if a, b := r.childMarker(), r.childMarker(); a == b || !under(a, r.id) {
		t.Errorf("child markers %q and %q: want distinct markers under %q", a, b, r.id)
	}
}

// TestRunCarriesMarker: every child gets a marker of its own below this run's id, even when
// the caller's Env sets the variable too.
func TestRunCarriesMarker(t *testing.T) {
	c := Command{Name: "marker", Path: os.Args[0], Args: []string{"-test.run=^$"}, Env: []string{helperEnv + "=marker", runEnv + "=forged"}}
	out, err := CombinedOutput(t.Context(), c)
	if err != nil {
		t.Fatalf("got %v: %s", err, out)
	}
	m := regexp.MustCompile(`marker=(\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("output %q has no marker line", out)
	}
	if got := string(m[1]); !under(got, thisRun.id) || got == thisRun.id {
		t.Errorf("child marker: got %q, want one below %q", got, thisRun.id)
	}
}

func TestRunReportsExitStatus(t *testing.T) {
	out, err := CombinedOutput(t.Context(), Command{Path: os.Args[0], Args: []string{"-test.run=^$"}, Env: []string{helperEnv + "=exit3"}})
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("got %v, want an *exec.ExitError with status 3", err)
	}
	if !strings.Contains(string(out), "helper: exiting with 3") {
		t.Errorf("output %q lacks the child's line", out)
	}
}

// TestRunStopsWhenContextEnds: Run returns soon after ctx ends, with the child gone.
func TestRunStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Run(ctx, Command{Path: os.Args[0], Args: []string{"-test.run=^$"}, Env: []string{helperEnv + "=wait-term"}}, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > DefaultStopTimeout/2 {
		t.Errorf("Run took %v, want it to stop the child on SIGTERM", d)
	}
}

// helperEscape (a child of the test) starts a grandchild in a process group of its own and
// without Pdeathsig, as a program that escapes the harness would, prints its pid and waits.
func helperEscape() {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=wait-term")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fmt.Println("helper:", err)
		os.Exit(1)
	}
	fmt.Printf("helper: grandchild %d\n", cmd.Process.Pid)
	waitTerm()
}

// TestSurvivorsFindsEscapedDescendant: a descendant outside every group the harness started is
// still found by the marker it inherited, both for its ancestor and for the whole run, and
// CheckNoSurvivors kills it.
func TestSurvivorsFindsEscapedDescendant(t *testing.T) {
	p := startHelper(t, "escape")
	var m []string
	re := regexp.MustCompile(`helper: grandchild (\d+)`)
	if !Eventually(defaultTestTimeout, func() bool { m = re.FindStringSubmatch(p.LogTail(4000)); return m != nil }) {
		t.Fatalf("the helper did not start its grandchild:\n%s", p.LogTail(4000))
	}
	pid, _ := strconv.Atoi(m[1])
	p.Kill()
	short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	pids := func(ss []survivor) []int {
		var out []int
		for _, s := range ss {
			out = append(out, s.pid)
		}
		return out
	}
	left, err := awaitSurvivors(short, func(int) bool { return false }, p.marker)
	t.Cleanup(func() {
		for _, s := range left {
			s.kill()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{pid}, pids(left)); diff != "" {
		t.Fatalf("survivors under p's marker (-want +got):\n%s", diff)
	}
	if !under(left[0].marker, p.marker) || !strings.Contains(left[0].cmdline, "-test.run") {
		t.Errorf("survivor %v: want marker under %q and the helper's command line", left[0], p.marker)
	}
	err = CheckNoSurvivors(short)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pid %d ", pid)) {
		t.Fatalf("CheckNoSurvivors: got %v, want an error naming pid %d", err, pid)
	}
	ctx, cancel2 := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel2()
	if err := p.CheckNoSurvivors(ctx); err != nil {
		t.Errorf("after CheckNoSurvivors killed it: got %v, want none left", err)
	}
}
