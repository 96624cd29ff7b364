package engine

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/kvgate/kvgate/pkg/worker"
)

// The upstream side of DESIGN.md §11: what the gateway presents to a worker (its api_key as a
// bearer token, a client certificate) and which certificates it trusts from it. Every error
// names the spec key and the file, never a key.

// DialOptions returns the options of a gRPC connection the gateway makes for the worker of s:
// its own connection (grpc://) and its kvbridge sidecar's (kv_events=grpc://). They follow SMG's
// client transport (wire/smg-grpc.md §9): keepalive pings every 30 s with a 10 s timeout, also
// while idle; plaintext h2c, or TLS when s.TLS, trusting s.TLSCAFile (default: the system roots)
// and presenting s.TLSCertFile for mTLS. The api_key is not among them: it is the engine's, and
// the engine adds it to its own connection only (a sidecar is another process).
func DialOptions(s worker.Spec) ([]grpc.DialOption, error) {
	creds := insecure.NewCredentials()
	if s.TLS {
		tc, err := clientTLS(s)
		if err != nil {
			return nil, err
		}
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(tc)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
		grpc.WithInitialWindowSize(16 << 20),
		grpc.WithInitialConnWindowSize(32 << 20),
	}, nil
}

// clientTLS returns the TLS configuration s asks for beyond Go's defaults: its CA bundle and
// client certificate. nil when it names neither (the system roots, no client certificate).
func clientTLS(s worker.Spec) (*tls.Config, error) {
	if s.TLSCAFile == "" && s.TLSCertFile == "" {
		return nil, nil
	}
	tc, err := worker.LoadClientTLS(s.TLSCAFile, s.TLSCertFile, s.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("engine: worker %s: tls_ca_file, tls_cert_file, tls_key_file: %w", s.URL, err)
	}
	return tc, nil
}

// httpTransport returns the transport for an http(s):// worker: shared, or, when its spec
// names a CA bundle or a client certificate, a clone of shared with that TLS configuration
// (own, which the engine closes).
func httpTransport(s worker.Spec, shared http.RoundTripper) (rt http.RoundTripper, own *http.Transport, err error) {
	tc, err := clientTLS(s)
	if err != nil || tc == nil {
		return shared, nil, err
	}
	base, ok := shared.(*http.Transport)
	if !ok {
		base = NewTransport()
	}
	own = base.Clone()
	own.TLSClientConfig = tc
	return own, own, nil
}

// apiKey returns the worker's upstream key: api_key, or the trimmed content of api_key_file.
func apiKey(s worker.Spec) (string, error) {
	if s.APIKeyFile == "" {
		return s.APIKey, nil
	}
	b, err := os.ReadFile(s.APIKeyFile)
	if err != nil {
		return "", fmt.Errorf("engine: worker %s: api_key_file: %w", s.URL, err)
	}
	k := strings.TrimSpace(string(b))
	if !worker.ValidAPIKey(k) {
		return "", fmt.Errorf("engine: worker %s: api_key_file %s must hold one key of 1-%d printable ASCII characters without spaces", s.URL, s.APIKeyFile, worker.MaxAPIKeyLen)
	}
	return k, nil
}

// bearerCreds sends the worker's key on every gRPC call as "authorization: Bearer <key>", the
// metadata form of the HTTP header. It is sent over plaintext connections too, as an HTTP
// worker's key is over http://: the operator chose the transport (docs/security.md).
type bearerCreds string

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (b bearerCreds) RequireTransportSecurity() bool { return false }

// withTLSHint adds what to check to an error caused by an untrusted worker certificate.
func withTLSHint(err error) error {
	var ua x509.UnknownAuthorityError
	if err != nil && (errors.As(err, &ua) || strings.Contains(err.Error(), "certificate signed by unknown authority")) {
		return fmt.Errorf("%w (the worker's certificate is not signed by a trusted CA: check tls_ca_file)", err)
	}
	return err
}

var _ credentials.PerRPCCredentials = bearerCreds("")
