package worker

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseSpec(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Spec
	}{
		{"bare url", "http://Host:8000/", Spec{URL: "http://host:8000", DPSize: 1}},
		{"http path prefix", "url=https://h.example/v1prefix/", Spec{URL: "https://h.example/v1prefix", DPSize: 1}},
		{"all keys", "url=http://a:1,runtime=vLLM,model=m,kv_events=tcp://a:5557,replay=tcp://a:5558,topic=kv,dp_size=2,block_size=32",
			Spec{URL: "http://a:1", Runtime: "vllm", Model: "m", KVEvents: "tcp://a:5557", Replay: "tcp://a:5558", Topic: "kv", DPSize: 2, BlockSize: 32}},
		{"grpc", "url=grpc://10.0.0.1:50051,runtime=tokenspeed", Spec{URL: "grpc://10.0.0.1:50051", Runtime: "tokenspeed", DPSize: 1}},
		{"grpc events off", "url=grpc://h:1,kv_events=OFF", Spec{URL: "grpc://h:1", KVEvents: "off", DPSize: 1}},
		{"sidecar", "url=http://h:1, kv_events=grpc://h:9000", Spec{URL: "http://h:1", KVEvents: "grpc://h:9000", DPSize: 1}},
		{"https with ca and key file", "url=https://h:1,api_key_file=/run/k,tls_ca_file=/ca.pem",
			Spec{URL: "https://h:1", APIKeyFile: "/run/k", TLSCAFile: "/ca.pem", DPSize: 1}},
		{"grpc mtls", "url=grpc://h:1,tls=true,tls_ca_file=ca.pem,tls_cert_file=c.pem,tls_key_file=k.pem",
			Spec{URL: "grpc://h:1", TLS: true, TLSCAFile: "ca.pem", TLSCertFile: "c.pem", TLSKeyFile: "k.pem", DPSize: 1}},
		{"replay of a --kv-listen topic", "url=http://h:1,replay=tcp://h:2", Spec{URL: "http://h:1", Replay: "tcp://h:2", DPSize: 1}},
		{"prefill role, default bootstrap port", "url=http://h:1,role=Prefill", Spec{URL: "http://h:1", Role: RolePrefill, BootstrapPort: DefaultBootstrapPort, DPSize: 1}},
		{"prefill role, bootstrap port", "url=http://h:1,role=prefill,bootstrap_port=9001", Spec{URL: "http://h:1", Role: RolePrefill, BootstrapPort: 9001, DPSize: 1}},
		{"decode role", "url=http://h:1,role=decode", Spec{URL: "http://h:1", Role: RoleDecode, DPSize: 1}},
		{"both role is the default", "url=http://h:1,role=both", Spec{URL: "http://h:1", DPSize: 1}},
		{"tls sidecar of an http worker", "url=http://h:1,kv_events=grpc://h:9,tls=1",
			Spec{URL: "http://h:1", KVEvents: "grpc://h:9", TLS: true, DPSize: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSpec(tt.in)
			if err != nil {
				t.Fatalf("ParseSpec(%q): %v", tt.in, err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("ParseSpec(%q) (-want +got):\n%s", tt.in, d)
			}
			// String round-trips.
			again, err := ParseSpec(got.String())
			if err != nil || again != got {
				t.Errorf("round trip of %q: got %+v, %v; want %+v", got.String(), again, err, got)
			}
		})
	}
}

func TestSpecNeverShowsTheAPIKey(t *testing.T) {
	sp, err := ParseSpec("url=http://h:1,api_key=sk-s3cret=")
	if err != nil {
		t.Fatal(err)
	}
	if sp.APIKey != "sk-s3cret=" {
		t.Errorf("APIKey: got %q, want the key with its '='", sp.APIKey)
	}
	if got, want := sp.String(), "url=http://h:1,api_key=REDACTED"; got != want {
		t.Errorf("String: got %q, want %q", got, want)
	}
	if r := sp.Redacted(); r.APIKey != RedactedValue || sp.APIKey != "sk-s3cret=" {
		t.Errorf("Redacted: got %q (original now %q), want REDACTED and the original untouched", r.APIKey, sp.APIKey)
	}
	if r := (Spec{URL: "http://h:1"}).Redacted(); r.APIKey != "" {
		t.Errorf("Redacted without a key: got %q, want empty", r.APIKey)
	}
}

func TestParseSpecErrors(t *testing.T) {
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"no url", "runtime=vllm"},
		{"bad scheme", "url=ftp://h:1"},
		{"credentials", "url=http://user:s3cret@h:1"},
		{"query", "url=http://h:1/?token=s3cret"},
		{"grpc path", "url=grpc://h:1/x"},
		{"grpc no port", "url=grpc://h"},
		{"unknown key", "url=http://h:1,colour=red"},
		{"duplicate key", "url=http://h:1,url=http://h:2"},
		{"bad runtime", "url=grpc://h:1,runtime=trt"},
		{"bad dp", "url=http://h:1,dp_size=0x"},
		{"dp range", "url=http://h:1,dp_size=1000"},
		{"block range", "url=http://h:1,block_size=-1"},
		{"events scheme", "url=http://h:1,kv_events=http://h:2"},
		{"events credentials", "url=http://h:1,kv_events=tcp://u:s3cret@h:2"},
		{"replay with grpc events", "url=http://h:1,kv_events=grpc://h:3,replay=tcp://h:2"},
		{"replay with a worker's own grpc events", "url=grpc://h:1,replay=tcp://h:2"},
		{"port range", "url=http://h:99999"},
		{"not key value", "url=http://h:1,oops"},
		{"key and key file", "url=http://h:1,api_key=s3cret,api_key_file=/k"},
		{"key with a space", "url=http://h:1,api_key=s3cret x"},
		{"key not ascii", "url=http://h:1,api_key=s3cret\u00e9"},
		{"tls on plain http", "url=http://h:1,tls=true,api_key=s3cret"},
		{"tls not a bool", "url=grpc://h:1,tls=s3cret"},
		{"ca without tls", "url=http://h:1,tls_ca_file=/ca.pem,api_key=s3cret"},
		{"cert without key", "url=https://h:1,tls_cert_file=c.pem,api_key=s3cret"},
		{"bad role", "url=http://h:1,role=mixed"},
		{"bootstrap port on a decode worker", "url=http://h:1,role=decode,bootstrap_port=9000"},
		{"bootstrap port on a both worker", "url=http://h:1,bootstrap_port=9000"},
		{"bootstrap port range", "url=http://h:1,role=prefill,bootstrap_port=70000"},
		{"bootstrap port not a number", "url=http://h:1,role=prefill,bootstrap_port=x"},
		{"key without cert", "url=grpc://h:1,tls=true,tls_key_file=k.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSpec(tt.in)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("ParseSpec(%q): got %v, want ErrInvalidSpec", tt.in, err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q echoes a secret", err)
			}
		})
	}
}

func TestSpecEventEndpoint(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://h:1", ""},
		{"url=http://h:1,kv_events=tcp://h:5557", "tcp://h:5557"},
		{"grpc://h:1", EventsSelf},
		{"url=grpc://h:1,kv_events=off", ""},
		{"url=grpc://h:1,kv_events=grpc://b:2", "grpc://b:2"},
	}
	for _, tt := range tests {
		s, err := ParseSpec(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.EventEndpoint(); got != tt.want {
			t.Errorf("EventEndpoint(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}

func mustWorker(t *testing.T, spec string) *Worker {
	t.Helper()
	s, err := ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWorkerInFlightConcurrent(t *testing.T) {
	w := mustWorker(t, "http://h:1")
	h := Hold{Prefill: 5, Blocks: 7}
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); w.Acquire(h) }()
	}
	wg.Wait()
	if got := []int64{w.InFlight(), w.PendingPrefill(), w.ActiveBlocks()}; !cmp.Equal(got, []int64{100, 500, 700}) {
		t.Fatalf("in-flight, prefill, active: got %v, want [100 500 700]", got)
	}
	// Half of them see their first token before they end.
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rest := h
			if i%2 == 0 {
				w.Prefilled(h.Prefill)
				rest.Prefill = 0
			}
			w.Release(rest)
		}()
	}
	wg.Wait()
	if got := []int64{w.InFlight(), w.PendingPrefill(), w.ActiveBlocks()}; !cmp.Equal(got, []int64{0, 0, 0}) {
		t.Fatalf("in-flight, prefill, active after done: got %v, want [0 0 0]", got)
	}
}

func TestWorkerLoadBlend(t *testing.T) {
	w := mustWorker(t, "http://h:1")
	now := time.Unix(1000, 0)
	w.Acquire(Hold{})
	defer w.Release(Hold{})
	if got := w.Load(now, time.Second); got != 1 {
		t.Errorf("no engine sample: got %d, want 1", got)
	}
	w.SetEngineLoad(7, now)
	if got := w.Load(now.Add(500*time.Millisecond), time.Second); got != 7 {
		t.Errorf("fresh engine sample: got %d, want 7", got)
	}
	if got := w.Load(now.Add(2*time.Second), time.Second); got != 1 {
		t.Errorf("stale engine sample: got %d, want 1", got)
	}
	if got := w.Load(now, 0); got != 1 {
		t.Errorf("blending off: got %d, want 1", got)
	}
	w.SetEngineLoad(-5, now)
	if _, _, ok := w.EngineLoad(); ok {
		t.Errorf("EngineLoad after failed scrape: got ok, want unknown")
	}
}

// TestEngineWaiting: the waiting count is known only while its sample is fresh, and not after
// a failed scrape.
func TestEngineWaiting(t *testing.T) {
	w := mustWorker(t, "http://h:1")
	now := time.Unix(1000, 0)
	if _, ok := w.EngineWaiting(now, time.Second); ok {
		t.Error("no sample: got known, want unknown")
	}
	w.SetEngineWaiting(3)
	w.SetEngineLoad(5, now)
	if n, ok := w.EngineWaiting(now.Add(500*time.Millisecond), time.Second); !ok || n != 3 {
		t.Errorf("fresh sample: got %d %v, want 3 true", n, ok)
	}
	if _, ok := w.EngineWaiting(now.Add(2*time.Second), time.Second); ok {
		t.Error("stale sample: got known, want unknown")
	}
	if _, ok := w.EngineWaiting(now, 0); ok {
		t.Error("no max age: got known, want unknown")
	}
	w.SetEngineLoad(-1, now)
	if _, ok := w.EngineWaiting(now, time.Second); ok {
		t.Error("failed scrape: got known, want unknown")
	}
}

func TestWorkerHealthAndModel(t *testing.T) {
	w := mustWorker(t, "http://h:1")
	if w.Healthy() || w.Checked() {
		t.Fatalf("new worker: got healthy=%v checked=%v, want false false", w.Healthy(), w.Checked())
	}
	if !w.SetHealth(true, "") || w.SetHealth(true, "") {
		t.Errorf("SetHealth change reporting wrong")
	}
	if !w.SetHealth(false, "refused") || w.HealthMessage() != "refused" || w.Failures() != 1 {
		t.Errorf("failed check: got msg %q failures %d", w.HealthMessage(), w.Failures())
	}
	if !w.Serves("", "gw") || !w.Serves("gw", "gw") || w.Serves("other", "gw") {
		t.Errorf("Serves without spec model wrong")
	}
	w.SetReportedModel("engine-name")
	if !w.Serves("engine-name", "gw") || w.UpstreamModel("gw") != "engine-name" || w.ServedModel("gw") != "gw" {
		t.Errorf("reported model handling wrong")
	}
	m := mustWorker(t, "url=http://h:2,model=m2")
	if m.Serves("gw", "gw") || !m.Serves("m2", "gw") || m.UpstreamModel("m2") != "m2" || m.ServedModel("gw") != "m2" {
		t.Errorf("spec model handling wrong")
	}
}

func TestKeyStable(t *testing.T) {
	// FNV-1a 64 of "http://a:1": a fixed value so every replica agrees.
	if got, want := keyOf("http://a:1"), keyOf("http://a:1"); got != want || got == keyOf("http://a:2") {
		t.Errorf("keyOf not stable/distinct")
	}
}

func TestWorkerAdapters(t *testing.T) {
	w, err := New(Spec{URL: "http://a:1", Model: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	w.SetReportedModel("engine-base")
	in := []string{"sql-lora"}
	w.SetAdapters(in)
	in[0] = "mutated" // SetAdapters copies
	tests := []struct {
		name     string
		model    string
		serves   bool
		hasAd    bool
		upstream string
	}{
		{"adapter", "sql-lora", true, true, "sql-lora"},
		{"spec model", "gw", true, false, "engine-base"},
		{"reported model", "engine-base", true, false, "engine-base"},
		{"unknown", "other-lora", false, false, "engine-base"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := w.Serves(tt.model, "gw"); got != tt.serves {
				t.Errorf("Serves(%q): got %v, want %v", tt.model, got, tt.serves)
			}
			if got := w.HasAdapter(tt.model); got != tt.hasAd {
				t.Errorf("HasAdapter(%q): got %v, want %v", tt.model, got, tt.hasAd)
			}
			if got := w.UpstreamModel(tt.model); got != tt.upstream {
				t.Errorf("UpstreamModel(%q): got %q, want %q", tt.model, got, tt.upstream)
			}
		})
	}
	if d := cmp.Diff([]string{"sql-lora"}, w.Adapters()); d != "" {
		t.Errorf("Adapters (-want +got):\n%s", d)
	}
	w.SetAdapters(nil)
	if w.HasAdapter("sql-lora") || w.Adapters() != nil {
		t.Errorf("after SetAdapters(nil): got %v, want none", w.Adapters())
	}
}
