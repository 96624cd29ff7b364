package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every wait; nothing sleeps.
const testTimeout = 20 * time.Second

// startBridge serves a BridgeServer for runtime on a loopback port.
func startBridge(t *testing.T, runtime worker.Runtime) (*kvbridge.BridgeServer, string) {
	t.Helper()
	b, err := kvbridge.NewBridgeServer(kvbridge.BridgeConfig{Runtime: runtime}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, startGRPC(t, b.Register)
}

func startGRPC(t *testing.T, register func(grpc.ServiceRegistrar)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(kvbridge.BridgeServerOptions(), grpc.WaitForHandlers(true))...)
	register(srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String()
}

// runCmd runs the command line in-process with a deadline and returns exit code and outputs.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out, errb bytes.Buffer
	code = run(ctx, args, &out, &errb)
	if ctx.Err() != nil {
		t.Fatalf("kvbridge %v did not finish within %v; stderr:\n%s", args, testTimeout, errb.String())
	}
	return code, out.String(), errb.String()
}

// sampleBatches are fed to a bridge; wantLines is what tail prints for them, exactly.
func sampleBatches() []struct {
	rank int
	b    indexer.Batch
} {
	return []struct {
		rank int
		b    indexer.Batch
	}{
		{0, indexer.Batch{Seq: 100, Timestamp: 1732000000.25, Events: []indexer.Event{
			{Kind: indexer.EventStored, Hashes: []uint64{1 << 63, 42}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2},
			{Kind: indexer.EventStored, Hashes: []uint64{7}, Parent: 42, HasParent: true, Tokens: []uint32{5, 6}, BlockSize: 2,
				LoraID: -3, HasLoraID: true},
		}}},
		{1, indexer.Batch{Seq: 9, Timestamp: 0.5, Events: []indexer.Event{
			{Kind: indexer.EventRemoved, Hashes: []uint64{0xffffffffffffffff, 42}},
			{Kind: indexer.EventCleared},
		}}},
		{0, indexer.Batch{Seq: 101, Timestamp: 2, Events: []indexer.Event{
			{Kind: indexer.EventRemoved, Hashes: []uint64{7}},
			{Kind: indexer.EventRemoved, Hashes: []uint64{8}}, // beyond --count 5: never printed
		}}},
	}
}

var wantLines = []string{
	`{"seq":1,"rank":0,"ts":1732000000.25,"type":"stored","parent":null,"block_size":2,"blocks":[{"hash":-9223372036854775808,"tokens":[1,2]},{"hash":42,"tokens":[3,4]}],"lora_id":null,"medium":null}`,
	`{"seq":1,"rank":0,"ts":1732000000.25,"type":"stored","parent":42,"block_size":2,"blocks":[{"hash":7,"tokens":[5,6]}],"lora_id":-3,"medium":null}`,
	`{"seq":2,"rank":1,"ts":0.5,"type":"removed","hashes":[-1,42]}`,
	`{"seq":2,"rank":1,"ts":0.5,"type":"cleared"}`,
	`{"seq":3,"rank":0,"ts":2,"type":"removed","hashes":[7]}`,
}

func lines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestTailGRPC(t *testing.T) {
	for _, runtime := range worker.Runtimes() {
		t.Run(string(runtime), func(t *testing.T) {
			bridge, addr := startBridge(t, runtime)
			for _, s := range sampleBatches() {
				bridge.Batch(s.rank, &s.b)
			}
			code, stdout, stderr := runCmd(t, "tail", "--grpc", "grpc://"+addr, "--runtime", string(runtime), "--count", "5", "--timeout", "15s")
			if code != exitOK {
				t.Fatalf("exit code: got %d, want 0; stderr:\n%s", code, stderr)
			}
			if diff := cmp.Diff(wantLines, lines(stdout)); diff != "" {
				t.Errorf("stdout lines mismatch (-want +got):\n%s", diff)
			}
			for _, l := range lines(stdout) {
				if !json.Valid([]byte(l)) {
					t.Errorf("stdout line is not JSON: %s", l)
				}
			}
		})
	}
}

func TestTailGRPCLiveAndReset(t *testing.T) {
	bridge, addr := startBridge(t, worker.RuntimeVLLM)
	type result struct {
		code           int
		stdout, stderr string
	}
	res := make(chan result, 1)
	go func() {
		c, o, e := runCmd(t, "tail", "--grpc", addr, "--runtime", "vllm", "--count", "2")
		res <- result{c, o, e}
	}()
	// Published while tail runs: a live stream. Reset goes out as a cleared event and, from the
	// client's view, is just another event; nothing else reaches stdout.
	bridge.Reset(3, kvbridge.ResetRestart)
	bridge.Batch(0, &indexer.Batch{Timestamp: 1, Events: []indexer.Event{{Kind: indexer.EventRemoved, Hashes: []uint64{5}}}})
	var r result
	select {
	case r = <-res:
	case <-time.After(testTimeout):
		t.Fatal("tail did not exit after --count events")
	}
	if r.code != exitOK {
		t.Fatalf("exit code: got %d, want 0; stderr:\n%s", r.code, r.stderr)
	}
	got := lines(r.stdout)
	if len(got) != 2 || !strings.Contains(got[0], `"rank":3,`) || !strings.HasSuffix(got[0], `"type":"cleared"}`) ||
		got[1] != `{"seq":2,"rank":0,"ts":1,"type":"removed","hashes":[5]}` {
		t.Errorf("stdout: got %q, want a rank-3 cleared event then the removed event", got)
	}
}

func TestTailTimeout(t *testing.T) {
	bridge, addr := startBridge(t, worker.RuntimeSGLang)
	bridge.Batch(0, &indexer.Batch{Events: []indexer.Event{{Kind: indexer.EventCleared}}})
	t.Run("count not reached", func(t *testing.T) {
		code, stdout, stderr := runCmd(t, "tail", "--grpc", addr, "--runtime", "sglang", "--count", "3", "--timeout", "300ms")
		if code != exitError {
			t.Errorf("exit code: got %d, want %d", code, exitError)
		}
		if got := lines(stdout); len(got) != 1 {
			t.Errorf("stdout: got %q, want the one event", got)
		}
		if !strings.Contains(stderr, "got 1 of 3 events") {
			t.Errorf("stderr: got %q, want a timeout note", stderr)
		}
	})
	t.Run("idle timeout without count", func(t *testing.T) {
		code, stdout, stderr := runCmd(t, "tail", "--grpc", addr, "--runtime", "sglang", "--timeout", "300ms")
		if code != exitOK {
			t.Errorf("exit code: got %d, want 0; stderr:\n%s", code, stderr)
		}
		if got := lines(stdout); len(got) != 1 {
			t.Errorf("stdout: got %q, want the one event", got)
		}
	})
}

func TestTailGRPCUnimplemented(t *testing.T) {
	addr := startGRPC(t, func(grpc.ServiceRegistrar) {}) // no engine service at all
	code, stdout, stderr := runCmd(t, "tail", "--grpc", addr, "--runtime", "tokenspeed", "--timeout", "10s")
	if code != exitError {
		t.Errorf("exit code: got %d, want %d", code, exitError)
	}
	if stdout != "" {
		t.Errorf("stdout: got %q, want nothing", stdout)
	}
	if !strings.Contains(stderr, "UNIMPLEMENTED") || !strings.Contains(stderr, "approximate tree") {
		t.Errorf("stderr: got %q, want the UNIMPLEMENTED report", stderr)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := [][]string{
		{},
		{"frobnicate"},
		{"tail"},
		{"tail", "--grpc", "h:1"},
		{"tail", "--grpc", "h:1", "--zmq", "tcp://h:2", "--runtime", "vllm"},
		{"tail", "--grpc", "h:1", "--runtime", "trtllm"},
		{"tail", "--grpc", "h:1", "--runtime", "vllm", "--dp-size", "2"},
		{"tail", "--zmq", "tcp://h:1", "--runtime", "vllm"},
		{"tail", "--zmq", "tcp://h:1", "--count", "-1"},
		{"tail", "--zmq", "tcp://h:1", "--timeout", "soon"},
		{"serve", "--runtime", "vllm", "--listen", "127.0.0.1:0"},
		{"serve", "--zmq", "tcp://h:1", "--listen", "127.0.0.1:0"},
		{"serve", "--zmq", "tcp://h:1", "--runtime", "vllm"},
		{"serve", "--zmq", "tcp://h:1", "--runtime", "mlx", "--listen", "127.0.0.1:0"},
		{"serve", "--zmq", "tcp://h:1", "--runtime", "vllm", "--listen", "127.0.0.1:0", "--history", "0"},
		{"serve", "--zmq", "tcp://h:1", "--runtime", "vllm", "--listen", "127.0.0.1:0", "--snapshot-max-blocks", "0"},
		{"serve", "--zmq", "tcp://h:1", "--runtime", "vllm", "--listen", "127.0.0.1:0", "--snapshot-max-blocks", "-2"},
	}
	for _, args := range tests {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, stdout, stderr := runCmd(t, args...)
			if code != exitUsage {
				t.Errorf("exit code: got %d, want %d; stderr:\n%s", code, exitUsage, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout: got %q, want nothing", stdout)
			}
			if stderr == "" {
				t.Errorf("stderr: got nothing, want a usage message")
			}
		})
	}
}

func TestAppendEventJSON(t *testing.T) {
	tests := []struct {
		name string
		seq  uint64
		rank int
		ts   float64
		e    indexer.Event
		want string
	}{
		{"medium and parent 0 as none", 5, 2, 1e9, indexer.Event{Kind: indexer.EventStored, Hashes: []uint64{1}, HasParent: true,
			Tokens: []uint32{4294967295}, BlockSize: 1, Medium: "GPU"},
			`{"seq":5,"rank":2,"ts":1000000000,"type":"stored","parent":null,"block_size":1,"blocks":[{"hash":1,"tokens":[4294967295]}],"lora_id":null,"medium":"GPU"}`},
		{"odd medium escaped", 1, 0, 0.125, indexer.Event{Kind: indexer.EventStored, Hashes: []uint64{2}, Tokens: []uint32{1}, BlockSize: 1,
			Medium: "a\"b\\c\n\x01<\xff"},
			`{"seq":1,"rank":0,"ts":0.125,"type":"stored","parent":null,"block_size":1,"blocks":[{"hash":2,"tokens":[1]}],"lora_id":null,"medium":"a\"b\\c\n\u0001<` + "\uFFFD" + `"}`}, // invalid UTF-8 as a raw U+FFFD, as encoding/json writes it
		{"inconsistent tokens print empty lists", 1, 0, 0, indexer.Event{Kind: indexer.EventStored, Hashes: []uint64{2, 3}, Tokens: []uint32{1}, BlockSize: 1},
			`{"seq":1,"rank":0,"ts":0,"type":"stored","parent":null,"block_size":1,"blocks":[{"hash":2,"tokens":[]},{"hash":3,"tokens":[]}],"lora_id":null,"medium":null}`},
		{"removed empty", 0, 0, -1.5, indexer.Event{Kind: indexer.EventRemoved},
			`{"seq":0,"rank":0,"ts":-1.5,"type":"removed","hashes":[]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := string(appendEventJSON(nil, tc.seq, tc.rank, tc.ts, &tc.e))
			if got != tc.want+"\n" {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			var back struct {
				Medium *string `json:"medium"`
			}
			if err := json.Unmarshal([]byte(got), &back); err != nil {
				t.Fatalf("not valid JSON: %s: %v", got, err)
			}
			if want := strings.ToValidUTF8(tc.e.Medium, "\uFFFD"); tc.e.Medium != "" && (back.Medium == nil || *back.Medium != want) {
				t.Errorf("medium decodes to %v, want %q", back.Medium, want)
			}
		})
	}
}

func TestTailGRPCUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	code, stdout, stderr := runCmd(t, "tail", "--grpc", addr, "--runtime", "vllm", "--count", "1", "--timeout", "300ms")
	if code != exitError {
		t.Errorf("exit code: got %d, want %d", code, exitError)
	}
	if stdout != "" {
		t.Errorf("stdout: got %q, want nothing", stdout)
	}
	if !strings.Contains(stderr, "stream down") || !strings.Contains(stderr, "got 0 of 1 events") {
		t.Errorf("stderr: got %q, want a stream-down warning and the timeout note", stderr)
	}
}
