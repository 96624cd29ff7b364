package engine

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/worker"
)

const testTimeout = 10 * time.Second

// authRecorder records the Authorization header of every request by path.
type authRecorder struct {
	mu   sync.Mutex
	seen map[string][]string
}

func (a *authRecorder) add(path, v string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = map[string][]string{}
	}
	a.seen[path] = append(a.seen[path], v)
}

func (a *authRecorder) get() map[string][]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen
}

// startHTTPSWorker serves a minimal OpenAI worker over TLS with a certificate of ca; with
// clientCA set it requires a client certificate signed by it.
func startHTTPSWorker(t *testing.T, ca *testutil.CA, clientCA *testutil.CA, rec *authRecorder) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		rec.add(r.URL.Path, r.Header.Get("Authorization"))
		switch r.URL.Path {
		case "/v1/models":
			io.WriteString(w, `{"data":[{"id":"m"}]}`)
		case "/metrics":
			io.WriteString(w, "vllm:num_requests_running 1\nvllm:num_requests_waiting 2\n")
		case "/v1/completions":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"model":"m","choices":[{"text":"x"}]}`)
		}
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "worker").TLS(t)}}
	if clientCA != nil {
		srv.TLS.ClientCAs = clientCA.Pool()
		srv.TLS.ClientAuth = tls.RequireAndVerifyClientCert
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func newEngine(t *testing.T, spec worker.Spec) (Engine, error) {
	t.Helper()
	s, err := spec.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(s)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	e, err := New(w, Config{HTTP: tr})
	if err == nil {
		t.Cleanup(e.Close)
	}
	return e, err
}

func TestHTTPSWorkerWithKeyAndClientCertificate(t *testing.T) {
	ca := testutil.NewCA(t, "worker-ca")
	rec := &authRecorder{}
	srv := startHTTPSWorker(t, ca, ca, rec)
	client := ca.Client(t, "gateway")
	e, err := newEngine(t, worker.Spec{URL: srv.URL, APIKey: "sk-upstream", TLSCAFile: ca.CertFile, TLSCertFile: client.CertFile, TLSKeyFile: client.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := e.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	if m, err := e.Model(ctx); err != nil || m.Name != "m" {
		t.Fatalf("Model: got %+v, %v", m, err)
	}
	if n, err := e.Load(ctx); err != nil || n.Total() != 3 {
		t.Fatalf("Load: got %+v, %v", n, err)
	}
	req, aerr := openai.ParseCompletion([]byte(`{"prompt":"hi"}`), openai.Limits{})
	if aerr != nil {
		t.Fatal(aerr)
	}
	clientHeader := http.Header{"Authorization": {"Bearer client-key"}, "Api-Key": {"client-key"}, "X-Request-Id": {"r1"}}
	resp, err := e.Generate(ctx, &Request{Completion: req, Model: "m", Tokens: [][]uint32{nil}, Header: clientHeader})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	for {
		if _, err := resp.Body.Next(); err != nil {
			break
		}
	}
	resp.Body.Close()
	want := map[string][]string{"/health": {"Bearer sk-upstream"}, "/v1/models": {"Bearer sk-upstream"}, "/metrics": {"Bearer sk-upstream"}, "/v1/completions": {"Bearer sk-upstream"}}
	if d := cmp.Diff(want, rec.get()); d != "" {
		t.Errorf("Authorization by path (-want +got):\n%s", d)
	}
}

func TestHTTPSWorkerTrust(t *testing.T) {
	ca, other := testutil.NewCA(t, "worker-ca"), testutil.NewCA(t, "other-ca")
	srv := startHTTPSWorker(t, ca, nil, &authRecorder{})
	tests := []struct {
		name    string
		spec    worker.Spec
		wantErr string
	}{
		{"right CA", worker.Spec{URL: srv.URL, TLSCAFile: ca.CertFile}, ""},
		{"wrong CA", worker.Spec{URL: srv.URL, TLSCAFile: other.CertFile}, "check tls_ca_file"},
		{"system roots", worker.Spec{URL: srv.URL}, "check tls_ca_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := newEngine(t, tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			err = e.Health(ctx)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Health: got %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "x509")):
				t.Errorf("Health: got %v, want an x509 error saying %q", err, tt.wantErr)
			}
		})
	}
}

func TestCredentialFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("key", "  sk-from-file\n")
	bad := write("bad", "sk-secret-one\nsk-secret-two\n")
	notPEM := write("ca.pem", "sk-secret-not-a-cert")
	if k, err := apiKey(worker.Spec{URL: "http://h:1", APIKeyFile: good}); err != nil || k != "sk-from-file" {
		t.Errorf("api_key_file: got %q, %v; want sk-from-file", k, err)
	}
	for _, tt := range []struct {
		name string
		spec worker.Spec
		want string
	}{
		{"missing key file", worker.Spec{URL: "http://h:1", APIKeyFile: filepath.Join(dir, "nope")}, "api_key_file"},
		{"two keys in the file", worker.Spec{URL: "http://h:1", APIKeyFile: bad}, "one key"},
		{"CA not PEM", worker.Spec{URL: "https://h:1", TLSCAFile: notPEM}, "no PEM certificate"},
		{"missing cert", worker.Spec{URL: "https://h:1", TLSCertFile: filepath.Join(dir, "c"), TLSKeyFile: filepath.Join(dir, "k")}, "tls_cert_file"},
		{"grpc CA not PEM", worker.Spec{URL: "grpc://h:1", TLS: true, TLSCAFile: notPEM}, "no PEM certificate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newEngine(t, tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: got %v, want an error about %s", err, tt.want)
			}
			if strings.Contains(err.Error(), "sk-secret") {
				t.Errorf("error %q shows file content", err)
			}
		})
	}
}

// healthyVLLM answers HealthCheck and GetModelInfo and records the authorization metadata.
type healthyVLLM struct {
	vllm.UnimplementedVllmEngineServer
	rec *authRecorder
}

func (h *healthyVLLM) HealthCheck(ctx context.Context, _ *vllm.HealthCheckRequest) (*vllm.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h.rec.add("HealthCheck", strings.Join(md.Get("authorization"), ","))
	return &vllm.HealthCheckResponse{Healthy: true}, nil
}

func (h *healthyVLLM) GetModelInfo(ctx context.Context, _ *vllm.GetModelInfoRequest) (*vllm.GetModelInfoResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h.rec.add("GetModelInfo", strings.Join(md.Get("authorization"), ","))
	return &vllm.GetModelInfoResponse{ServedModelName: "m"}, nil
}

// startTLSGRPC serves a vLLM servicer over TLS requiring a client certificate of ca.
func startTLSGRPC(t *testing.T, ca *testutil.CA, rec *authRecorder) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "grpc-worker").TLS(t)}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(tc)))
	vllm.RegisterVllmEngineServer(s, &healthyVLLM{rec: rec})
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return ln.Addr().String()
}

func TestGRPCWorkerMTLSAndKey(t *testing.T) {
	ca, other := testutil.NewCA(t, "grpc-ca"), testutil.NewCA(t, "other-ca")
	rec := &authRecorder{}
	addr := startTLSGRPC(t, ca, rec)
	client := ca.Client(t, "gateway")
	stranger := other.Client(t, "stranger")
	tests := []struct {
		name    string
		spec    worker.Spec
		wantErr string
	}{
		{"mtls with key", worker.Spec{URL: "grpc://" + addr, Runtime: "vllm", TLS: true, TLSCAFile: ca.CertFile, TLSCertFile: client.CertFile, TLSKeyFile: client.KeyFile, APIKey: "sk-grpc"}, ""},
		{"wrong CA", worker.Spec{URL: "grpc://" + addr, Runtime: "vllm", TLS: true, TLSCAFile: other.CertFile, TLSCertFile: client.CertFile, TLSKeyFile: client.KeyFile}, "check tls_ca_file"},
		{"client certificate of another CA", worker.Spec{URL: "grpc://" + addr, Runtime: "vllm", TLS: true, TLSCAFile: ca.CertFile, TLSCertFile: stranger.CertFile, TLSKeyFile: stranger.KeyFile}, "grpc health"},
		{"no client certificate", worker.Spec{URL: "grpc://" + addr, Runtime: "vllm", TLS: true, TLSCAFile: ca.CertFile}, "grpc health"},
		{"plaintext", worker.Spec{URL: "grpc://" + addr, Runtime: "vllm"}, "grpc health"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := newEngine(t, tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			err = e.Health(ctx)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Health: %v", err)
				}
				if m, err := e.Model(ctx); err != nil || m.Name != "m" {
					t.Fatalf("Model: got %+v, %v", m, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Health: got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
	want := map[string][]string{"HealthCheck": {"Bearer sk-grpc"}, "GetModelInfo": {"Bearer sk-grpc"}}
	if d := cmp.Diff(want, rec.get()); d != "" {
		t.Errorf("authorization metadata (-want +got):\n%s", d)
	}
}

func TestDialOptionsPlaintextUnlessTLS(t *testing.T) {
	if _, err := DialOptions(worker.Spec{URL: "grpc://h:1"}); err != nil {
		t.Errorf("plaintext: %v", err)
	}
	if _, err := DialOptions(worker.Spec{URL: "grpc://h:1", TLS: true}); err != nil {
		t.Errorf("TLS with the system roots: %v", err)
	}
}
