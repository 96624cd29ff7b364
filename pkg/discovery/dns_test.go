package discovery

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// fakeDNS is a DNS server on a loopback UDP port answering A, AAAA and SRV questions from maps
// the test changes, so that the resolver under test is the real one (NewResolver), wire and all.
type fakeDNS struct {
	pc net.PacketConn
	// mu guards the records and fail.
	mu   sync.Mutex
	ips  map[string][]netip.Addr // absolute name → addresses
	srvs map[string][]net.SRV    // absolute name → records (targets absolute)
	fail bool                    // answer SERVFAIL to everything
	done chan struct{}
}

func newFakeDNS(t *testing.T) *fakeDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeDNS{pc: pc, ips: map[string][]netip.Addr{}, srvs: map[string][]net.SRV{}, done: make(chan struct{})}
	go f.serve()
	t.Cleanup(func() { pc.Close(); <-f.done })
	return f
}

func (f *fakeDNS) addr() string { return f.pc.LocalAddr().String() }

// set replaces the addresses of name ("" addresses: the name does not exist).
func (f *fakeDNS) set(name string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(addrs) == 0 {
		delete(f.ips, name)
		return
	}
	var ips []netip.Addr
	for _, a := range addrs {
		ips = append(ips, netip.MustParseAddr(a))
	}
	f.ips[name] = ips
}

func (f *fakeDNS) setSRV(name string, recs ...net.SRV) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.srvs[name] = recs
}

func (f *fakeDNS) setFail(fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fail
}

func (f *fakeDNS) serve() {
	defer close(f.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := f.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp, ok := f.answer(buf[:n]); ok {
			_, _ = f.pc.WriteTo(resp, from)
		}
	}
}

func (f *fakeDNS) answer(req []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	name := strings.ToLower(q.Name.String())
	f.mu.Lock()
	defer f.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	ips, hasIPs := f.ips[name]
	srvs, hasSRV := f.srvs[name]
	switch {
	case f.fail:
		rh.RCode = dnsmessage.RCodeServerFailure
	case !hasIPs && !hasSRV:
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	_ = b.StartQuestions()
	_ = b.Question(q)
	_ = b.StartAnswers()
	rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
	if rh.RCode == dnsmessage.RCodeSuccess {
		switch q.Type {
		case dnsmessage.TypeA:
			for _, ip := range ips {
				if ip.Is4() {
					_ = b.AResource(rr, dnsmessage.AResource{A: ip.As4()})
				}
			}
		case dnsmessage.TypeAAAA:
			for _, ip := range ips {
				if ip.Is6() {
					_ = b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: ip.As16()})
				}
			}
		case dnsmessage.TypeSRV:
			for _, s := range srvs {
				_ = b.SRVResource(rr, dnsmessage.SRVResource{Priority: s.Priority, Weight: s.Weight, Port: s.Port, Target: dnsmessage.MustNewName(s.Target)})
			}
		}
	}
	out, err := b.Finish()
	return out, err == nil
}
