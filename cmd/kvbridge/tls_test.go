package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/internal/testutil"
)

// `kvbridge serve` over mTLS: a client with the right CA and certificate tails it; without a
// certificate, with a certificate of another CA, or in plaintext it cannot.
func TestServeMTLS(t *testing.T) {
	ca, other := testutil.NewCA(t, "bridge-ca"), testutil.NewCA(t, "other-ca")
	srv, cli, stranger := ca.Server(t, "bridge"), ca.Client(t, "gateway"), other.Client(t, "stranger")
	eng := startZMQEngine(t, 1)
	for _, b := range engineBatches() {
		eng.publish(t, 0, b)
	}
	addr := startServe(t, "--zmq", eng.pubEP, "--replay", eng.replayEP, "--runtime", "vllm", "--listen", "127.0.0.1:0",
		"--tls-cert", srv.CertFile, "--tls-key", srv.KeyFile, "--tls-client-ca", ca.CertFile)
	code, stdout, stderr := runCmd(t, "tail", "--grpc", addr, "--runtime", "vllm", "--count", "4", "--timeout", "15s",
		"--tls-ca", ca.CertFile, "--tls-cert", cli.CertFile, "--tls-key", cli.KeyFile)
	if code != exitOK {
		t.Fatalf("tail over mTLS: exit %d; stderr:\n%s", code, stderr)
	}
	if diff := cmp.Diff(engineLines(1, 0, true), lines(stdout)); diff != "" {
		t.Errorf("tail over mTLS (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"plaintext", nil},
		{"no client certificate", []string{"--tls-ca", ca.CertFile}},
		{"client certificate of another CA", []string{"--tls-ca", ca.CertFile, "--tls-cert", stranger.CertFile, "--tls-key", stranger.KeyFile}},
		{"wrong CA", []string{"--tls-ca", other.CertFile, "--tls-cert", cli.CertFile, "--tls-key", cli.KeyFile}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, _ := runCmd(t, append([]string{"tail", "--grpc", addr, "--runtime", "vllm", "--count", "1", "--timeout", "3s"}, tt.args...)...)
			if code == exitOK || strings.TrimSpace(stdout) != "" {
				t.Errorf("got exit %d with events %q, want a failure and no events", code, stdout)
			}
		})
	}
}

func TestTLSFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--zmq", "tcp://h:1", "--runtime", "vllm", "--listen", "127.0.0.1:0", "--tls-cert", "c.pem"},
		{"serve", "--zmq", "tcp://h:1", "--runtime", "vllm", "--listen", "127.0.0.1:0", "--tls-client-ca", "ca.pem"},
		{"tail", "--zmq", "tcp://h:1", "--tls"},
	} {
		if code, _, _ := runCmd(t, args...); code != exitUsage {
			t.Errorf("%q: got exit %d, want %d", args, code, exitUsage)
		}
	}
}
