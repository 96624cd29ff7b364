package router

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/worker"
)

// startTLSGRPC serves register's services over TLS with a server certificate of ca, requiring
// client certificates of ca.
func startTLSGRPC(t *testing.T, ca *testutil.CA, register func(*grpc.Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "sidecar").TLS(t)}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(tc)))
	register(s)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return ln.Addr().String()
}

// A kvbridge sidecar served over mTLS: an http:// worker with tls=true and the sidecar's CA and
// a client certificate gets its events.
func TestSidecarOverMTLS(t *testing.T) {
	ca := testutil.NewCA(t, "sidecar-ca")
	cli := ca.Client(t, "gateway")
	a := newFakeWorker(t, "m")
	bridge, err := kvbridge.NewBridgeServer(kvbridge.BridgeConfig{Runtime: worker.RuntimeVLLM}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := startTLSGRPC(t, ca, func(s *grpc.Server) { bridge.Register(s) })
	t.Cleanup(bridge.Close)
	g := newTestGateway(t, testConfig{}, "url="+a.url()+",kv_events=grpc://"+addr+",tls=true,tls_ca_file="+ca.CertFile+
		",tls_cert_file="+cli.CertFile+",tls_key_file="+cli.KeyFile+",api_key=sk-not-for-the-sidecar")
	m := g.members()[0]
	g.waitFor(t, "sidecar stream up over mTLS", func() bool { st, _ := m.StreamState(); return st == kvbridge.StreamUp })
	bridge.Batch(0, storedBatch(bytesOf(strings.Repeat("s", 48)), 16, 7))
	g.waitFor(t, "blocks from the sidecar", func() bool { return m.IndexBlocks() == 3 })
}
