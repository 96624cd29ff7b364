package main

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// TestHelperProcess is not a test: re-executed by TestFaultExitAfter, it runs main with the
// arguments after "--".
func TestHelperProcess(t *testing.T) {
	if os.Getenv("SIMWORKER_HELPER") != "1" {
		return
	}
	for i, a := range os.Args {
		if a == "--" {
			os.Args = append([]string{"simworker"}, os.Args[i+1:]...)
			break
		}
	}
	main()
	os.Exit(0)
}

func TestFaultExitAfter(t *testing.T) {
	port := freePort(t)
	p, err := harness.Start(harness.Command{Name: "simworker", Path: os.Args[0], Env: []string{"SIMWORKER_HELPER=1"},
		Args: []string{"-test.run=^TestHelperProcess$", "--",
			"--host", "127.0.0.1", "--port", strconv.Itoa(port), "--time-scale", "0.001", "--fault-exit-after", "2", "--log-level", "error"}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(3 * defaultTestTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never healthy: %v", err)
		}
		<-tick.C
	}
	post := func() error {
		resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"prompt":[1,2,3],"max_tokens":2}`))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := post(); err != nil {
		t.Fatalf("first request: %v", err)
	}
	_ = post() // the process exits right after completing this one
	select {
	case <-p.Done():
		_, err := p.Exited()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Errorf("exit: got %v, want status 3", err)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatalf("process still running after 2 completed requests\n%s", p.LogTail(2000))
	}
}
