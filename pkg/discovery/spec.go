package discovery

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/pkg/worker"
)

// ErrInvalidSpec is wrapped by every error of ParseSpec.
var ErrInvalidSpec = errors.New("invalid discover spec")

// Template placeholders of a Spec's worker keys.
const (
	// PlaceholderHost is an address the name resolved to (for SRV, an address of a record's
	// target), bracketed when it is IPv6 so that it fits in a URL: 10.0.0.7, [fd00::7].
	PlaceholderHost = "{host}"
	// PlaceholderPort is an SRV record's port; it is only meaningful with srv=true.
	PlaceholderPort = "{port}"
)

// Spec is one --discover value: the DNS name to resolve and the worker spec template each
// address becomes. Build it with ParseSpec; the zero value is invalid.
type Spec struct {
	// Name is the DNS name (dns=). As in resolv.conf, a name with a trailing dot is absolute;
	// without one the resolver's search list may apply.
	Name string
	// SRV looks up SRV records (srv=true) instead of A/AAAA; each record's target is then
	// resolved to its addresses, and its port fills {port}.
	SRV bool
	// items are the worker spec's key=value pairs, placeholders unexpanded, in the given order.
	items []string
}

// ParseSpec parses the --discover syntax: a worker spec (pkg/worker's comma-separated key=value
// pairs) whose url names no host but {host}, plus dns=NAME (required) and optionally srv=true.
// Any value may use {host}, and with srv=true {port}:
//
//	dns=vllm.ns.svc.cluster.local,url=http://{host}:8000,kv_events=tcp://{host}:5557,replay=tcp://{host}:5558
//	dns=_http._tcp.vllm.ns.svc.cluster.local,srv=true,url=http://{host}:{port}
//
// The template is checked by expanding it once with a documentation address, so a spec that
// could never produce a valid worker is rejected here, not on its first answer. Errors never
// quote values (a spec may carry an api_key).
func ParseSpec(s string) (Spec, error) {
	var sp Spec
	hasURL := false
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return Spec{}, fmt.Errorf("discovery: parse spec: item %d is not key=value: %w", i+1, ErrInvalidSpec)
		}
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		switch k {
		case "dns":
			if sp.Name != "" {
				return Spec{}, fmt.Errorf("discovery: parse spec: dns given twice: %w", ErrInvalidSpec)
			}
			sp.Name = v
		case "srv":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Spec{}, fmt.Errorf("discovery: parse spec: srv must be true or false: %w", ErrInvalidSpec)
			}
			sp.SRV = b
		default:
			if k == "url" {
				hasURL = true
				if !strings.Contains(v, PlaceholderHost) {
					return Spec{}, fmt.Errorf("discovery: parse spec: url must name its host as %s: %w", PlaceholderHost, ErrInvalidSpec)
				}
			}
			sp.items = append(sp.items, k+"="+v)
		}
	}
	switch {
	case sp.Name == "":
		return Spec{}, fmt.Errorf("discovery: parse spec: dns=NAME is required: %w", ErrInvalidSpec)
	case !validName(sp.Name):
		return Spec{}, fmt.Errorf("discovery: parse spec: dns %q is not a DNS name: %w", sp.Name, ErrInvalidSpec)
	case !hasURL:
		return Spec{}, fmt.Errorf("discovery: parse spec: url=TEMPLATE is required (e.g. url=http://%s:8000): %w", PlaceholderHost, ErrInvalidSpec)
	case !sp.SRV && strings.Contains(strings.Join(sp.items, ","), PlaceholderPort):
		return Spec{}, fmt.Errorf("discovery: parse spec: %s needs srv=true (A/AAAA records carry no port): %w", PlaceholderPort, ErrInvalidSpec)
	}
	if _, err := sp.Expand(Address{Addr: netip.MustParseAddr("192.0.2.1"), Port: 1}); err != nil {
		return Spec{}, fmt.Errorf("discovery: parse spec dns=%s: %w", sp.Name, err)
	}
	return sp, nil
}

// validName reports whether n can be a DNS name: 1-253 characters of letters, digits, '-', '_'
// (SRV labels) and dots, with no empty label but a final root dot.
func validName(n string) bool {
	n = strings.TrimSuffix(n, ".")
	if n == "" || len(n) > 253 {
		return false
	}
	for _, l := range strings.Split(n, ".") {
		if l == "" || len(l) > 63 {
			return false
		}
		for _, c := range l {
			if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return false
			}
		}
	}
	return true
}

// Origin is the worker origin of the spec's workers, as /workers shows it: "dns NAME".
func (s Spec) Origin() string { return "dns " + s.Name }

// Model returns the template's model= value ("" when it names none).
func (s Spec) Model() string {
	for _, it := range s.items {
		if v, ok := strings.CutPrefix(it, "model="); ok {
			return v
		}
	}
	return ""
}

// WithModel returns s with model=name when it names no model (a discover spec inside a
// config file's model entry); naming another model is an error.
func (s Spec) WithModel(name string) (Spec, error) {
	switch m := s.Model(); {
	case m == name:
		return s, nil
	case m != "":
		return s, fmt.Errorf("discovery: spec dns=%s names model %q inside model %q: %w", s.Name, m, name, ErrInvalidSpec)
	}
	s.items = append(append([]string(nil), s.items...), "model="+name)
	return s, nil
}

// String formats s in the --discover syntax. Like worker.Spec's String it never shows an
// api_key; two specs with the same String are the same.
func (s Spec) String() string {
	var b strings.Builder
	b.WriteString("dns=")
	b.WriteString(s.Name)
	if s.SRV {
		b.WriteString(",srv=true")
	}
	for _, it := range s.items {
		if strings.HasPrefix(it, "api_key=") {
			it = "api_key=" + worker.RedactedValue
		}
		b.WriteString(",")
		b.WriteString(it)
	}
	return b.String()
}

// key identifies s among a Watcher's specs, api_key included.
func (s Spec) key() string {
	return s.Name + "\x00" + strconv.FormatBool(s.SRV) + "\x00" + strings.Join(s.items, ",")
}

// Address is one answer: an address and, from an SRV record, a port (0 otherwise).
type Address struct {
	Addr netip.Addr
	Port uint16
}

// Expand returns the worker spec of one address: the template with {host} and {port} filled in,
// parsed and normalized as a --worker value.
func (s Spec) Expand(a Address) (worker.Spec, error) {
	host := a.Addr.Unmap().String()
	if a.Addr.Unmap().Is6() {
		host = "[" + host + "]"
	}
	r := strings.NewReplacer(PlaceholderHost, host, PlaceholderPort, strconv.Itoa(int(a.Port)))
	items := make([]string, len(s.items))
	for i, it := range s.items {
		items[i] = r.Replace(it)
	}
	return worker.ParseSpec(strings.Join(items, ","))
}

// String formats the address for logs: addr, or host:port for an SRV answer.
func (a Address) String() string {
	if a.Port == 0 {
		return a.Addr.String()
	}
	return net.JoinHostPort(a.Addr.String(), strconv.Itoa(int(a.Port)))
}
