package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

const defaultTestTimeout = 10 * time.Second

// helperEnv selects a helper mode when the test binary re-executes itself as a child process.
const helperEnv = "HARNESS_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(runTests(m))
	case "http":
		helperHTTP()
	case "exit3":
		fmt.Println("helper: exiting with 3")
		os.Exit(3)
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("helper: ignoring SIGTERM")
		select {}
	case "marker":
		fmt.Printf("marker=%s\n", os.Getenv(runEnv))
	case "wait-term":
		waitTerm()
	case "nginx-parent":
		helperNginxParent()
	case "escape":
		helperEscape()
	}
}

// runTests runs the tests, then fails when a goroutine or a process started by them is left.
func runTests(m *testing.M) int {
	code := m.Run()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := CheckNoSurvivors(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "goroutine leak:", err)
		return 1
	}
	return 0
}

// waitTerm blocks until SIGTERM, then exits 0.
func waitTerm() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	os.Exit(0)
}

// helperHTTP serves 200 on /health at the port in HELPER_PORT until SIGTERM, then exits 0.
func helperHTTP() {
	l, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("HELPER_PORT"))
	if err != nil {
		fmt.Println("helper:", err)
		os.Exit(1)
	}
	fmt.Println("helper: listening")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			w.WriteHeader(http.StatusOK)
			return
		}
		http.NotFound(w, r)
	})}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; srv.Close() }()
	_ = srv.Serve(l)
	os.Exit(0)
}

func startHelper(t *testing.T, mode string, env ...string) *Process {
	t.Helper()
	p, err := Start(Command{Name: mode, Path: os.Args[0], Args: []string{"-test.run=^$"}, Env: append([]string{helperEnv + "=" + mode}, env...)}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill() })
	return p
}

func TestFreePortsDistinctAndBindable(t *testing.T) {
	ports, err := FreeTCPPorts(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d returned twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("got bind error %v for port %d, want a free port", err, p)
		}
		l.Close()
	}
}

func TestStartWaitStop(t *testing.T) {
	port := freePort(t)
	p := startHelper(t, "http", fmt.Sprintf("HELPER_PORT=%d", port))
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", port), http.StatusOK, p); err != nil {
		t.Fatalf("got %v, want ready", err)
	}
	if err := p.Stop(defaultTestTimeout); err != nil {
		t.Fatalf("Stop: got %v, want nil (clean exit on SIGTERM)", err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	if got := p.LogTail(1000); !strings.Contains(got, "helper: listening") {
		t.Errorf("log tail %q does not contain the child's output", got)
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("second Stop: got %v, want nil", err)
	}
}

func TestWaitHTTPSeesProcessExit(t *testing.T) {
	port := freePort(t)
	p := startHelper(t, "exit3")
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	err := WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", port), http.StatusOK, p)
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("got %v, want an error saying the process exited", err)
	}
	exited, werr := p.Exited()
	if !exited || werr == nil {
		t.Fatalf("got exited=%v err=%v, want exited with an error", exited, werr)
	}
	if err := p.Stop(time.Second); err == nil {
		t.Error("Stop after a non-zero exit: got nil, want the exit error")
	}
}

func TestWaitHTTPTimeout(t *testing.T) {
	port := freePort(t) // nobody listens here
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/", port), http.StatusOK, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
}

func TestStopKillsProcessIgnoringSIGTERM(t *testing.T) {
	p := startHelper(t, "ignore-term")
	// Wait until the child has installed its handler, observed through its log.
	if !Eventually(defaultTestTimeout, func() bool { return strings.Contains(p.LogTail(1000), "ignoring SIGTERM") }) {
		t.Fatal("helper did not start")
	}
	err := p.Stop(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("got %v, want an error saying it was killed", err)
	}
	if ok, _ := p.Exited(); !ok {
		t.Fatal("process still running after Stop")
	}
}

func TestEventually(t *testing.T) {
	n := 0
	if !Eventually(defaultTestTimeout, func() bool { n++; return n >= 3 }) {
		t.Fatal("got false, want true after 3 polls")
	}
	if Eventually(100*time.Millisecond, func() bool { return false }) {
		t.Fatal("got true for a condition that never holds")
	}
}

func TestBuildUnknownCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Build(ctx, t.TempDir(), "no-such-command"); err == nil {
		t.Fatal("got nil, want a build error for a missing ./cmd/no-such-command")
	}
}

func TestTokenizer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	path, err := Tokenizer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("got %s (stat error %v), want an existing non-empty tokenizer.json", path, err)
	}
}

func TestBuildBinariesUnknownCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if b, err := BuildBinaries(ctx, t.TempDir(), "no-such-command"); err == nil {
		t.Fatalf("got %+v, nil, want a build error for a missing ./cmd/no-such-command", b)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := FreeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
