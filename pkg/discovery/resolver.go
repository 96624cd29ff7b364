package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
)

// Resolver is what a Watcher needs of DNS; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// NewResolver returns a resolver that sends every query to server (HOST:PORT, --dns-server)
// instead of the name servers of /etc/resolv.conf, over UDP and over TCP when an answer is
// truncated.
//
// It is the standard library's own resolver (PreferGo) with a Dial to that server, not a DNS
// library such as github.com/miekg/dns: it already does what discovery needs (A and AAAA
// together, SRV, CNAME chains, TCP fallback, context deadlines, the search list), and adds no
// dependency. What a DNS library would add is not needed: record TTLs (names are re-resolved
// on a fixed interval) and an SRV answer's additional section (the targets are resolved through
// the same server). Like any Go resolver it answers names in /etc/hosts from that file first.
func NewResolver(server string) (*net.Resolver, error) {
	host, port, err := net.SplitHostPort(server)
	if p, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("discovery: dns server %q: want HOST:PORT", server)
	}
	var d net.Dialer
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, server)
	}}, nil
}

// lookup resolves spec's name into its addresses, sorted and without duplicates: the A/AAAA
// records, or each SRV record's target's addresses with the record's port. A name that does
// not exist, or has no such records, is an empty answer, not an error: that is what DNS says
// of a Service scaled to zero.
func lookup(ctx context.Context, r Resolver, spec Spec) ([]Address, error) {
	var out []Address
	if !spec.SRV {
		ips, err := r.LookupNetIP(ctx, "ip", spec.Name)
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		for _, ip := range ips {
			out = append(out, Address{Addr: ip.Unmap()})
		}
		return dedupe(out), nil
	}
	_, srvs, err := r.LookupSRV(ctx, "", "", spec.Name)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, s := range srvs {
		if s.Target == "." { // "service decidedly not available" (RFC 2782)
			continue
		}
		// An IP target needs no lookup; a name is resolved through the same server.
		if ip, perr := netip.ParseAddr(s.Target); perr == nil {
			out = append(out, Address{Addr: ip.Unmap(), Port: s.Port})
			continue
		}
		ips, err := r.LookupNetIP(ctx, "ip", s.Target)
		if notFound(err) {
			continue // a target gone between the two answers
		}
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", s.Target, err)
		}
		for _, ip := range ips {
			out = append(out, Address{Addr: ip.Unmap(), Port: s.Port})
		}
	}
	return dedupe(out), nil
}

// notFound reports whether err says the name (or the records asked for) does not exist.
func notFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

func dedupe(as []Address) []Address {
	slices.SortFunc(as, func(a, b Address) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		return int(a.Port) - int(b.Port)
	})
	return slices.Compact(as)
}

var _ Resolver = (*net.Resolver)(nil)
