package discovery

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/kvgate/kvgate/pkg/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const defaultTestTimeout = 10 * time.Second

func TestParseSpec(t *testing.T) {
	tests := []struct {
		in     string
		srv    bool
		expand Address
		want   string // the expanded worker spec
	}{
		{"dns=vllm.ns.svc.cluster.local,url=http://{host}:8000,kv_events=tcp://{host}:5557,replay=tcp://{host}:5558", false,
			Address{Addr: netip.MustParseAddr("10.0.0.7")}, "url=http://10.0.0.7:8000,kv_events=tcp://10.0.0.7:5557,replay=tcp://10.0.0.7:5558"},
		{"dns=vllm.test.,url=http://{host}:8000,model=m", false, Address{Addr: netip.MustParseAddr("fd00::7")}, "url=http://[fd00::7]:8000,model=m"},
		{"DNS=_http._tcp.vllm.test,srv=TRUE,url=grpc://{host}:{port},runtime=sglang", true,
			Address{Addr: netip.MustParseAddr("10.0.0.8"), Port: 30001}, "url=grpc://10.0.0.8:30001,runtime=sglang"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			s, err := ParseSpec(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if s.SRV != tt.srv {
				t.Errorf("srv: got %v, want %v", s.SRV, tt.srv)
			}
			ws, err := s.Expand(tt.expand)
			if err != nil {
				t.Fatal(err)
			}
			if got := ws.String(); got != tt.want {
				t.Errorf("expanded: got %s, want %s", got, tt.want)
			}
		})
	}
	for _, bad := range []string{
		"url=http://{host}:8000",                          // no dns
		"dns=a.test",                                      // no url
		"dns=a.test,url=http://10.0.0.1:8000",             // url without {host}
		"dns=a.test,url=http://{host}:{port}",             // {port} without srv
		"dns=a..test,url=http://{host}:1",                 // not a name
		"dns=a.test,url=ftp://{host}:1",                   // not a worker
		"dns=a.test,url=http://{host}:1,colour=red",       // unknown worker key
		"dns=a.test,dns=b.test,url=http://{host}:1",       // twice
		"dns=a.test,srv=maybe,url=http://{host}:1",        // srv not a bool
		"dns=a.test,url=http://{host}:1,api_key=s3cret x", // bad key: must not be quoted
	} {
		_, err := ParseSpec(bad)
		if err == nil {
			t.Errorf("ParseSpec(%q) succeeded", bad)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseSpec(%q): error %q quotes the key", bad, err)
		}
	}
}

func TestSpecModelAndString(t *testing.T) {
	s, err := ParseSpec("dns=a.test,url=http://{host}:1,api_key=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.String(); strings.Contains(got, "s3cret") || got != "dns=a.test,url=http://{host}:1,api_key=REDACTED" {
		t.Errorf("String: got %s", got)
	}
	m, err := s.WithModel("qwen3")
	if err != nil || m.Model() != "qwen3" || s.Model() != "" {
		t.Errorf("WithModel: got %q (%v), original %q", m.Model(), err, s.Model())
	}
	if _, err := m.WithModel("llama"); err == nil {
		t.Error("WithModel of another model succeeded")
	}
	if s.Origin() != "dns a.test" {
		t.Errorf("origin: got %q", s.Origin())
	}
}

func TestNewResolverRejects(t *testing.T) {
	for _, bad := range []string{"", "127.0.0.1", ":53", "127.0.0.1:0", "127.0.0.1:dns"} {
		if _, err := NewResolver(bad); err == nil {
			t.Errorf("NewResolver(%q) succeeded", bad)
		}
	}
}

// TestLookupThroughTheServer resolves A/AAAA and SRV names through the fake server with the
// real resolver: sorted, deduplicated addresses; a missing name is an empty answer; a failing
// server an error.
func TestLookupThroughTheServer(t *testing.T) {
	dns := newFakeDNS(t)
	r, err := NewResolver(dns.addr())
	if err != nil {
		t.Fatal(err)
	}
	dns.set("pool.test.", "127.0.0.3", "127.0.0.2", "::1")
	dns.set("t1.test.", "127.0.0.5")
	dns.set("t2.test.", "127.0.0.6")
	dns.setSRV("_http._tcp.pool.test.", net.SRV{Target: "t2.test.", Port: 9000}, net.SRV{Target: "t1.test.", Port: 8000}, net.SRV{Target: "gone.test.", Port: 1})
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for _, tt := range []struct {
		spec string
		want []string
	}{
		{"dns=pool.test.,url=http://{host}:1", []string{"127.0.0.2", "127.0.0.3", "::1"}},
		{"dns=_http._tcp.pool.test.,srv=true,url=http://{host}:{port}", []string{"127.0.0.5:8000", "127.0.0.6:9000"}},
		{"dns=missing.test.,url=http://{host}:1", nil},
	} {
		s, err := ParseSpec(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		as, err := lookup(ctx, r, s)
		if err != nil {
			t.Fatalf("%s: %v", tt.spec, err)
		}
		var got []string
		for _, a := range as {
			got = append(got, a.String())
		}
		if d := cmp.Diff(tt.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tt.spec, d)
		}
	}
	dns.setFail(true)
	s, _ := ParseSpec("dns=pool.test.,url=http://{host}:1")
	if _, err := lookup(ctx, r, s); err == nil {
		t.Error("a failing server gave no error")
	}
}

// updates records what a Watcher reports, for the test to wait on.
type updates struct{ ch chan upd }

type upd struct {
	origin string
	urls   []string
}

func (u *updates) update(origin string, specs []worker.Spec) error {
	var urls []string
	for _, s := range specs {
		urls = append(urls, s.URL)
	}
	u.ch <- upd{origin, urls}
	return nil
}

// next waits for the next report that satisfies ok, skipping the others (every round reports).
func (u *updates) next(t *testing.T, what string, ok func(upd) bool) upd {
	t.Helper()
	deadline := time.After(defaultTestTimeout)
	for {
		select {
		case x := <-u.ch:
			if ok(x) {
				return x
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func urlsAre(origin string, want ...string) func(upd) bool {
	return func(x upd) bool { return x.origin == origin && slices.Equal(want, x.urls) }
}

// TestWatcher: addresses appear and leave as the server's answer changes; while the server
// fails the last answer stays (counted); a spec no longer watched reports no workers.
func TestWatcher(t *testing.T) {
	dns := newFakeDNS(t)
	r, err := NewResolver(dns.addr())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	u := &updates{ch: make(chan upd, 16)}
	w, err := New(Config{Interval: 20 * time.Millisecond, Resolver: r, Registerer: reg}, u.update)
	if err != nil {
		t.Fatal(err)
	}
	dns.set("pool.test.", "127.0.0.2", "127.0.0.3")
	s, _ := ParseSpec("dns=pool.test.,url=http://{host}:8000")
	if err := w.Set([]Spec{s}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		for { // unblock a report in progress
			select {
			case <-u.ch:
				continue
			case <-done:
			}
			break
		}
	}()
	const origin = "dns pool.test."
	u.next(t, "two workers", urlsAre(origin, "http://127.0.0.2:8000", "http://127.0.0.3:8000"))
	dns.set("pool.test.", "127.0.0.3", "127.0.0.4")
	u.next(t, "a changed answer", urlsAre(origin, "http://127.0.0.3:8000", "http://127.0.0.4:8000"))

	dns.setFail(true)
	deadline := time.Now().Add(defaultTestTimeout)
	for testutil.ToFloat64(w.met.lookups.WithLabelValues("pool.test.", outcomeError)) < 3 {
		select {
		case x := <-u.ch:
			t.Fatalf("reported %v while the server fails, want the last answer kept", x)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no failed lookups counted")
		}
	}
	dns.setFail(false)
	u.next(t, "answers again", urlsAre(origin, "http://127.0.0.3:8000", "http://127.0.0.4:8000"))
	if got := testutil.ToFloat64(w.met.workers.WithLabelValues("pool.test.")); got != 2 {
		t.Errorf("workers gauge: got %v, want 2", got)
	}

	dns.set("pool.test.") // scaled to zero: NXDOMAIN
	u.next(t, "no workers", urlsAre(origin))
	dns.set("pool.test.", "127.0.0.2")
	u.next(t, "scaled up again", urlsAre(origin, "http://127.0.0.2:8000"))

	if err := w.Set([]Spec{s, s}); err == nil {
		t.Error("Set of one name twice succeeded")
	}
	if err := w.Set(nil); err != nil {
		t.Fatal(err)
	}
	u.next(t, "the spec dropped", urlsAre(origin)) // only the drop reports nothing now
}
