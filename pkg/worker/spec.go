package worker

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Kind is the protocol the gateway speaks to a worker, from its URL scheme.
type Kind uint8

const (
	// KindHTTP: an OpenAI-compatible HTTP server (http:// or https://); requests are proxied.
	KindHTTP Kind = iota + 1
	// KindGRPC: an SMG engine servicer (grpc://); the gateway calls Generate with token ids.
	KindGRPC
)

// String returns "http" or "grpc".
func (k Kind) String() string {
	switch k {
	case KindHTTP:
		return "http"
	case KindGRPC:
		return "grpc"
	}
	return "unknown"
}

// KVEventsOff is the kv_events value that disables the event stream of a grpc:// worker (whose
// default is to subscribe on the worker's own connection).
const KVEventsOff = "off"

// Limits on spec values; larger values are rejected as typos rather than trusted.
const (
	MaxDPSize    = 256
	MaxBlockSize = 1 << 16
)

// ErrInvalidSpec is wrapped by every error of ParseSpec and Spec.Normalize.
var ErrInvalidSpec = errors.New("invalid worker spec")

// Spec describes one worker as the user configured it. The same keys are used by the
// comma-separated --worker flag, the YAML config file and the admin API's JSON bodies. The zero
// value is invalid (URL is required); Normalize fills defaults and validates.
type Spec struct {
	// URL is http://host:port[/prefix], https://... or grpc://host:port. It must not carry
	// credentials, a query or a fragment. Required.
	URL string `json:"url" yaml:"url"`
	// Runtime is vllm, sglang or tokenspeed for grpc:// workers; empty means "detect" (the
	// router probes each service's HealthCheck). Ignored for http:// workers.
	Runtime Runtime `json:"runtime,omitempty" yaml:"runtime,omitempty"`
	// Model is the served model name; empty means the gateway's model (and the worker's own
	// name, from /v1/models or GetModelInfo, is used when forwarding).
	Model string `json:"model,omitempty" yaml:"model,omitempty"`
	// KVEvents is the worker's KV-event source: tcp://host:port (an engine's ZMQ PUB; rank r
	// publishes on port+r), grpc://host:port (a `kvbridge serve` sidecar), or "off". Empty: no
	// events for http:// workers, the worker's own SubscribeKvEvents for grpc:// workers.
	KVEvents string `json:"kv_events,omitempty" yaml:"kv_events,omitempty"`
	// Replay is the ZMQ replay (ROUTER) endpoint tcp://host:port; rank r uses port+r. With
	// kv_events=tcp:// it repairs that subscription's gaps; with no kv_events it repairs the
	// gaps of the worker's topic on the gateway's --kv-listen collector.
	Replay string `json:"replay,omitempty" yaml:"replay,omitempty"`
	// Topic is the ZMQ subscription topic prefix; empty subscribes to everything.
	Topic string `json:"topic,omitempty" yaml:"topic,omitempty"`
	// DPSize is the number of data-parallel ranks publishing events (default 1).
	DPSize int `json:"dp_size,omitempty" yaml:"dp_size,omitempty"`
	// BlockSize is the engine's KV block size in tokens; 0 means "learn it from the first
	// stored event, else use the gateway's --block-size".
	BlockSize int `json:"block_size,omitempty" yaml:"block_size,omitempty"`
	// Role is prefill, decode or both (""; the default): see Role. BootstrapPort is the
	// SGLang or vLLM Mooncake bootstrap server port of a prefill worker (default DefaultBootstrapPort; 0 on
	// other roles, where it is not accepted).
	Role          Role `json:"role,omitempty" yaml:"role,omitempty"`
	BootstrapPort int  `json:"bootstrap_port,omitempty" yaml:"bootstrap_port,omitempty"`

	// APIKey is sent as "Authorization: Bearer <key>" on every call to the worker (requests,
	// health checks, model discovery, metric scrapes), as engines started with --api-key
	// require; APIKeyFile names a file holding it instead (read when the worker is added). At
	// most one of them. The client's own credentials are never forwarded. String and Redacted
	// never show the key.
	APIKey     string `json:"api_key,omitempty" yaml:"api_key,omitempty"`
	APIKeyFile string `json:"api_key_file,omitempty" yaml:"api_key_file,omitempty"`
	// TLS turns on TLS for the worker's gRPC connections: a grpc:// worker's own, and a
	// kv_events=grpc:// sidecar's. An https:// worker uses TLS for HTTP without it.
	TLS bool `json:"tls,omitempty" yaml:"tls,omitempty"`
	// TLSCAFile is a PEM bundle of the CAs that sign the worker's certificates (default: the
	// system roots); TLSCertFile and TLSKeyFile are the gateway's client certificate and key
	// for mTLS (both or neither). They apply to every TLS connection of the worker, so they
	// need an https:// URL or TLS.
	TLSCAFile   string `json:"tls_ca_file,omitempty" yaml:"tls_ca_file,omitempty"`
	TLSCertFile string `json:"tls_cert_file,omitempty" yaml:"tls_cert_file,omitempty"`
	TLSKeyFile  string `json:"tls_key_file,omitempty" yaml:"tls_key_file,omitempty"`
}

// RedactedValue replaces a credential wherever a spec is shown.
const RedactedValue = "REDACTED"

// Redacted returns s with its api_key replaced by RedactedValue, for showing the spec (the
// admin API's worker list, logs).
func (s Spec) Redacted() Spec {
	if s.APIKey != "" {
		s.APIKey = RedactedValue
	}
	return s
}

// UsesTLS reports whether the worker's HTTP (https://) or gRPC (tls) connections use TLS.
func (s Spec) UsesTLS() bool { return s.TLS || strings.HasPrefix(s.URL, "https://") }

// ParseSpec parses the --worker flag syntax: comma-separated key=value pairs with the keys url,
// runtime, model, kv_events, replay, topic, dp_size, block_size, role, bootstrap_port, api_key, api_key_file, tls,
// tls_ca_file, tls_cert_file and tls_key_file. A first item without "=" is taken as the url, so
// "--worker http://h:8000" works. The result is normalized (see Normalize). Error messages never
// contain URL credentials or keys.
func ParseSpec(s string) (Spec, error) {
	var sp Spec
	s = strings.TrimSpace(s)
	if s == "" {
		return sp, fmt.Errorf("worker: parse spec: empty: %w", ErrInvalidSpec)
	}
	seen := make(map[string]bool, 8)
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			if i != 0 {
				return sp, fmt.Errorf("worker: parse spec: item %d is not key=value: %w", i+1, ErrInvalidSpec)
			}
			k, v = "url", item
		}
		k = strings.ToLower(strings.TrimSpace(k))
		v = strings.TrimSpace(v)
		if seen[k] {
			return sp, fmt.Errorf("worker: parse spec: duplicate key %q: %w", k, ErrInvalidSpec)
		}
		seen[k] = true
		switch k {
		case "url":
			sp.URL = v
		case "runtime":
			sp.Runtime = Runtime(v)
		case "model":
			sp.Model = v
		case "kv_events":
			sp.KVEvents = v
		case "replay":
			sp.Replay = v
		case "topic":
			sp.Topic = v
		case "api_key":
			sp.APIKey = v
		case "api_key_file":
			sp.APIKeyFile = v
		case "tls":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return sp, fmt.Errorf("worker: parse spec: tls must be true or false: %w", ErrInvalidSpec)
			}
			sp.TLS = b
		case "role":
			sp.Role = Role(v)
		case "tls_ca_file":
			sp.TLSCAFile = v
		case "tls_cert_file":
			sp.TLSCertFile = v
		case "tls_key_file":
			sp.TLSKeyFile = v
		case "dp_size", "block_size", "bootstrap_port":
			n, err := strconv.Atoi(v)
			if err != nil {
				return sp, fmt.Errorf("worker: parse spec: %s must be an integer: %w", k, ErrInvalidSpec)
			}
			switch k {
			case "dp_size":
				sp.DPSize = n
			case "block_size":
				sp.BlockSize = n
			default:
				sp.BootstrapPort = n
			}
		default:
			return sp, fmt.Errorf("worker: parse spec: unknown key %q (want url, runtime, model, kv_events, replay, topic, dp_size, block_size, role, bootstrap_port, api_key, api_key_file, tls, tls_ca_file, tls_cert_file, tls_key_file): %w", k, ErrInvalidSpec)
		}
	}
	return sp.Normalize()
}

// Normalize validates s and returns it with defaults filled and the URL in canonical form
// (lower-case scheme and host, no trailing slash). It is what ParseSpec, the config loader and
// the admin API all call, so every entry point accepts the same specs.
func (s Spec) Normalize() (Spec, error) {
	if s.URL == "" {
		return s, fmt.Errorf("worker: spec: url is required: %w", ErrInvalidSpec)
	}
	u, err := parseEndpoint(s.URL, "url", "http", "https", "grpc")
	if err != nil {
		return s, err
	}
	s.URL = u
	// A runtime is also accepted on http:// workers, where it only documents the engine.
	if s.Runtime, err = ParseRuntime(string(s.Runtime)); err != nil {
		return s, fmt.Errorf("worker: spec: %w", err)
	}
	switch {
	case s.KVEvents == "" || strings.EqualFold(s.KVEvents, KVEventsOff):
		if s.KVEvents != "" {
			s.KVEvents = KVEventsOff
		}
	default:
		if s.KVEvents, err = parseEndpoint(s.KVEvents, "kv_events", "tcp", "grpc"); err != nil {
			return s, err
		}
	}
	if s.Replay != "" {
		if s.Replay, err = parseEndpoint(s.Replay, "replay", "tcp"); err != nil {
			return s, err
		}
		// A publisher that connects to the gateway's --kv-listen collector still binds a replay
		// ROUTER of its own (llm-d's simulator does), so replay also goes with no event source
		// of the worker's own; only a gRPC stream has no use for it.
		if !strings.HasPrefix(s.KVEvents, "tcp://") && s.EventEndpoint() != "" {
			return s, fmt.Errorf("worker: spec: replay needs a tcp:// kv_events endpoint, or none (the --kv-listen collector's topic): %w", ErrInvalidSpec)
		}
	}
	if s.DPSize == 0 {
		s.DPSize = 1
	}
	if s.DPSize < 1 || s.DPSize > MaxDPSize {
		return s, fmt.Errorf("worker: spec: dp_size %d out of range [1,%d]: %w", s.DPSize, MaxDPSize, ErrInvalidSpec)
	}
	if s.BlockSize < 0 || s.BlockSize > MaxBlockSize {
		return s, fmt.Errorf("worker: spec: block_size %d out of range [1,%d]: %w", s.BlockSize, MaxBlockSize, ErrInvalidSpec)
	}
	if err := s.normalizeRole(); err != nil {
		return s, err
	}
	return s, s.checkCredentials()
}

// normalizeRole validates the role and defaults a prefill worker's bootstrap port.
func (s *Spec) normalizeRole() error {
	r, err := ParseRole(string(s.Role))
	if err != nil {
		return fmt.Errorf("worker: spec: %w", err)
	}
	s.Role = r
	switch {
	case s.BootstrapPort != 0 && r != RolePrefill:
		return fmt.Errorf("worker: spec: bootstrap_port applies to role=prefill workers: %w", ErrInvalidSpec)
	case s.BootstrapPort < 0 || s.BootstrapPort > 65535:
		return fmt.Errorf("worker: spec: bootstrap_port %d out of range [1,65535]: %w", s.BootstrapPort, ErrInvalidSpec)
	case r == RolePrefill && s.BootstrapPort == 0:
		s.BootstrapPort = DefaultBootstrapPort
	}
	return nil
}

// MaxAPIKeyLen bounds an upstream key: it travels in a header.
const MaxAPIKeyLen = 4096

// checkCredentials validates the api_key and TLS keys; its errors never quote the key.
func (s Spec) checkCredentials() error {
	switch {
	case s.APIKey != "" && s.APIKeyFile != "":
		return fmt.Errorf("worker: spec: give api_key or api_key_file, not both: %w", ErrInvalidSpec)
	case s.APIKey != "" && !ValidAPIKey(s.APIKey):
		return fmt.Errorf("worker: spec: api_key must be 1-%d printable ASCII characters without spaces: %w", MaxAPIKeyLen, ErrInvalidSpec)
	case s.TLS && s.Kind() != KindGRPC && !strings.HasPrefix(s.KVEvents, "grpc://"):
		return fmt.Errorf("worker: spec: tls=true applies to gRPC connections (a grpc:// url or a kv_events=grpc:// sidecar); an HTTP worker uses TLS with an https:// url: %w", ErrInvalidSpec)
	case (s.TLSCAFile != "" || s.TLSCertFile != "" || s.TLSKeyFile != "") && !s.UsesTLS():
		return fmt.Errorf("worker: spec: tls_ca_file, tls_cert_file and tls_key_file need an https:// url or tls=true: %w", ErrInvalidSpec)
	case (s.TLSCertFile == "") != (s.TLSKeyFile == ""):
		return fmt.Errorf("worker: spec: give tls_cert_file and tls_key_file together: %w", ErrInvalidSpec)
	}
	return nil
}

// ValidAPIKey reports whether k can be sent as a bearer token: 1 to MaxAPIKeyLen visible
// ASCII characters.
func ValidAPIKey(k string) bool {
	if len(k) == 0 || len(k) > MaxAPIKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// Kind returns the protocol of the spec's URL. It is only meaningful on a normalized spec.
func (s Spec) Kind() Kind { return kindOf(s.URL) }

// EventEndpoint returns where the worker's KV events come from after defaults: "" when it has
// none, "self" for a grpc:// worker subscribing on its own connection, else the tcp:// or
// grpc:// endpoint.
func (s Spec) EventEndpoint() string {
	switch {
	case s.KVEvents == KVEventsOff:
		return ""
	case s.KVEvents != "":
		return s.KVEvents
	case s.Kind() == KindGRPC:
		return EventsSelf
	}
	return ""
}

// EventsSelf is what EventEndpoint returns for a grpc:// worker's own SubscribeKvEvents.
const EventsSelf = "self"

// String formats s in the --worker flag syntax with the non-default keys only; an api_key is
// written as api_key=REDACTED, so a spec's String is safe to log (and does not round-trip it).
func (s Spec) String() string {
	var b strings.Builder
	b.WriteString("url=")
	b.WriteString(s.URL)
	add := func(k, v string) {
		if v != "" {
			b.WriteString(",")
			b.WriteString(k)
			b.WriteString("=")
			b.WriteString(v)
		}
	}
	add("runtime", string(s.Runtime))
	add("model", s.Model)
	add("kv_events", s.KVEvents)
	add("replay", s.Replay)
	add("topic", s.Topic)
	if s.DPSize > 1 {
		add("dp_size", strconv.Itoa(s.DPSize))
	}
	if s.BlockSize > 0 {
		add("block_size", strconv.Itoa(s.BlockSize))
	}
	if s.Role != RoleBoth {
		add("role", string(s.Role))
	}
	if s.BootstrapPort > 0 && s.BootstrapPort != DefaultBootstrapPort {
		add("bootstrap_port", strconv.Itoa(s.BootstrapPort))
	}
	add("api_key", s.Redacted().APIKey)
	add("api_key_file", s.APIKeyFile)
	if s.TLS {
		add("tls", "true")
	}
	add("tls_ca_file", s.TLSCAFile)
	add("tls_cert_file", s.TLSCertFile)
	add("tls_key_file", s.TLSKeyFile)
	return b.String()
}

func kindOf(u string) Kind {
	switch {
	case strings.HasPrefix(u, "grpc://"):
		return KindGRPC
	case strings.HasPrefix(u, "http://"), strings.HasPrefix(u, "https://"):
		return KindHTTP
	}
	return 0
}

// parseEndpoint validates an endpoint URL with one of the given schemes. Only http(s) URLs may
// carry a path. Errors name the field, never the raw value when it might hold credentials.
func parseEndpoint(raw, field string, schemes ...string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error echoes the input, which may contain a password: report the field only.
		return "", fmt.Errorf("worker: spec: %s is not a valid URL: %w", field, ErrInvalidSpec)
	}
	if u.User != nil {
		return "", fmt.Errorf("worker: spec: %s must not contain credentials: %w", field, ErrInvalidSpec)
	}
	scheme := strings.ToLower(u.Scheme)
	ok := false
	for _, s := range schemes {
		if scheme == s {
			ok = true
		}
	}
	if !ok {
		return "", fmt.Errorf("worker: spec: %s scheme %q not allowed (want %s): %w", field, scheme, strings.Join(schemes, ", "), ErrInvalidSpec)
	}
	if u.Opaque != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", fmt.Errorf("worker: spec: %s must be scheme://host:port with no query or fragment: %w", field, ErrInvalidSpec)
	}
	host := u.Host
	if host == "" {
		return "", fmt.Errorf("worker: spec: %s has no host: %w", field, ErrInvalidSpec)
	}
	h, port, err := net.SplitHostPort(host)
	needPort := scheme == "tcp" || scheme == "grpc"
	switch {
	case err != nil && needPort:
		return "", fmt.Errorf("worker: spec: %s needs host:port: %w", field, ErrInvalidSpec)
	case err == nil:
		p, perr := strconv.Atoi(port)
		if perr != nil || p < 1 || p > 65535 {
			return "", fmt.Errorf("worker: spec: %s port %q out of range: %w", field, port, ErrInvalidSpec)
		}
		if h == "" {
			return "", fmt.Errorf("worker: spec: %s has no host: %w", field, ErrInvalidSpec)
		}
	}
	path := strings.TrimRight(u.EscapedPath(), "/")
	if path != "" && scheme != "http" && scheme != "https" {
		return "", fmt.Errorf("worker: spec: %s must not have a path: %w", field, ErrInvalidSpec)
	}
	return scheme + "://" + strings.ToLower(host) + path, nil
}

// keyOf returns the stable 64-bit identity of a worker URL (FNV-1a of the normalized URL), the
// same on every gateway replica so that rendezvous hashing agrees without shared state.
func keyOf(url string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(url))
	return h.Sum64()
}
