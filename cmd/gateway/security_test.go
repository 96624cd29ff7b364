package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
)

// get sends a request with an optional bearer key and returns the status.
func get(t *testing.T, url, key string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestAdminOnItsOwnListener(t *testing.T) {
	w := slowSSEWorker(t, make(chan struct{}, 1), make(chan struct{}))
	gw := startGateway(t, "--worker", w.URL)
	waitReady(t, gw.api)
	for _, p := range []string{"/workers", "/debug/route?tokens=1,2"} {
		if got := get(t, gw.api+p, ""); got != http.StatusNotFound {
			t.Errorf("API listener %s: got %d, want 404", p, got)
		}
		if got := get(t, gw.admin+p, ""); got != http.StatusOK {
			t.Errorf("admin listener %s: got %d, want 200", p, got)
		}
	}
	if got := get(t, gw.admin+"/v1/models", ""); got != http.StatusNotFound {
		t.Errorf("admin listener /v1/models: got %d, want 404", got)
	}
}

func TestAdminListenerBeyondLoopbackNeedsToken(t *testing.T) {
	tests := []struct {
		name string
		args []string
		err  string
	}{
		{"loopback without token", []string{"--admin-host", "127.0.0.1"}, ""},
		{"localhost without token", []string{"--admin-host", "localhost"}, ""},
		{"all interfaces without token", []string{"--admin-host", "0.0.0.0"}, "--admin-token"},
		{"empty host without token", []string{"--admin-host", ""}, "--admin-token"},
		{"all interfaces with token", []string{"--admin-host", "0.0.0.0", "--admin-token", "t0ken"}, ""},
		{"disabled", []string{"--admin-host", "0.0.0.0", "--admin-port", "-1"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KVGATE_ADMIN_TOKEN", "")
			o, err := parseOptions(append([]string{"--host", "127.0.0.1", "--port", "0", "--prometheus-port", "-1", "--admin-port", "0"}, tt.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			l, err := listen(o)
			if err == nil {
				l.api.Close()
				if l.admin != nil {
					l.admin.Close()
				}
			}
			if tt.err == "" && err != nil {
				t.Fatalf("listen: got %v, want nil", err)
			}
			if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("listen: got %v, want an error naming %s", err, tt.err)
			}
		})
	}
}

func TestAdminTokenFromEnvironment(t *testing.T) {
	t.Setenv("KVGATE_ADMIN_TOKEN", "env-t0ken")
	o, err := parseOptions(nil, io.Discard)
	if err != nil || o.AdminToken != "env-t0ken" {
		t.Fatalf("got token %q, %v; want the environment's", o.AdminToken, err)
	}
}

// --help and flag errors print flag values as defaults; secrets must not be among them.
func TestSecretsNeverInUsage(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	os.WriteFile(cfg, []byte("admin_token: adm1n-S3CRET\napi_keys: [\"client-S3CRET\"]\n"), 0o600)
	for _, args := range [][]string{{"--config", cfg, "--no-such-flag"}, {"--config", cfg, "--port", "x"}, {"--admin-token", "adm1n-S3CRET", "--api-key", "client-S3CRET", "--bogus"}} {
		var stderr strings.Builder
		_, err := parseOptions(args, &stderr)
		if err == nil {
			t.Fatalf("parseOptions(%q): got nil error", args)
		}
		if strings.Contains(stderr.String()+err.Error(), "S3CRET") {
			t.Errorf("parseOptions(%q) printed a secret:\n%s", args, stderr.String())
		}
	}
}

func TestClientKeysAndReload(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "keys")
	if err := os.WriteFile(keyFile, []byte("# clients\nalpha:key-alpha\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := slowSSEWorker(t, make(chan struct{}, 1), make(chan struct{}))
	gw := startGateway(t, "--worker", w.URL, "--api-key", "ops:key-flag", "--api-key-file", keyFile)
	waitReady(t, gw.api)
	for _, tt := range []struct {
		key  string
		want int
	}{{"", 401}, {"key-wrong", 401}, {"key-alpha", 200}, {"key-flag", 200}} {
		if got := get(t, gw.api+"/v1/models", tt.key); got != tt.want {
			t.Errorf("key %q: got %d, want %d", tt.key, got, tt.want)
		}
	}
	if err := os.WriteFile(keyFile, []byte("beta:key-beta\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw.reload <- os.Interrupt // any signal value: serve only counts them
	testutil.WaitFor(t, "the new key file in force", func() bool { return get(t, gw.api+"/v1/models", "key-beta") == 200 })
	if got := get(t, gw.api+"/v1/models", "key-alpha"); got != 401 {
		t.Errorf("removed key after reload: got %d, want 401", got)
	}
	if got := get(t, gw.api+"/v1/models", "key-flag"); got != 200 {
		t.Errorf("flag key after reload: got %d, want 200", got)
	}
	// A broken file leaves the keys in force.
	if err := os.WriteFile(keyFile, []byte("bad line with spaces\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw.reload <- os.Interrupt
	gw.reload <- os.Interrupt // unbuffered: taken only once the first reload has run
	if got := get(t, gw.api+"/v1/models", "key-beta"); got != 200 {
		t.Errorf("after a broken reload: got %d, want the old keys kept (200)", got)
	}
	if got := get(t, gw.api+"/health", ""); got != 200 {
		t.Errorf("/health without a key: got %d, want 200", got)
	}
}

func TestBadKeyFlagsAreStartupErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("# nothing\n"), 0o600)
	for _, args := range [][]string{{"--api-key", "has space-S3CRET"}, {"--api-key-file", empty}, {"--api-key-file", filepath.Join(dir, "missing")}, {"--api-key", "a:k1", "--api-key", "a:k2"}} {
		o, err := parseOptions(append([]string{"--port", "0", "--prometheus-port", "-1", "--admin-port", "-1"}, args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		_, err = loadClientKeys(o)
		if err == nil {
			t.Errorf("%q: got nil error", args)
			continue
		}
		if strings.Contains(err.Error(), "S3CRET") {
			t.Errorf("%q: error %q shows the key", args, err)
		}
	}
}
