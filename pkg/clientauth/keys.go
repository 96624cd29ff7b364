package clientauth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Limits of client key files: a key or name past them is a mistake (a pasted certificate, a
// line that lost its newline), not a credential.
const (
	MaxKeyLen     = 4096
	MaxKeyNameLen = 64
)

// ErrInvalidKeys is wrapped by every error of ParseKeys and NewKeySet. Their messages name the
// line, never its content: a file of keys must not end up in a log because one line is wrong.
var ErrInvalidKeys = errors.New("invalid client keys")

// MaxPriority bounds the priority bands a key file grants and a request may ask for
// (-MaxPriority … MaxPriority): a band labels metrics, so the set of bands must stay small.
const MaxPriority = 100

// APIKey is one client key and the name it is known by. The name labels metrics and logs;
// the key never appears anywhere but in the request that presents it.
type APIKey struct {
	Name string
	Key  string
	// Priority is the admission band of the key's requests that ask for none, and BestPriority
	// the lowest (most urgent) band they may ask for (vLLM's meaning: lower runs first); a
	// request asking for a lower one gets BestPriority. Both 0 unless the key file grants
	// them (priority=DEFAULT[/BEST]); BestPriority ≤ Priority.
	Priority, BestPriority int
}

// ParseKeys reads client keys in the --api-key-file format: one per line, either KEY or
// NAME:KEY (split at the first ':'; a key that itself holds a ':' must therefore be named),
// optionally followed by :priority=DEFAULT[/BEST], the key's admission bands (APIKey.Priority,
// BestPriority; BEST defaults to DEFAULT, so a key cannot ask for a band above its default
// unless granted; a key ending in ":priority=…" must therefore be followed by its own grant).
// Blank lines and lines starting with '#' are skipped and surrounding spaces trimmed. A key is
// 1 to MaxKeyLen printable ASCII bytes without spaces (it travels in a header); a name is 1 to
// MaxKeyNameLen letters, digits, '.', '_' or '-'. An unnamed key is named prefix-LINE (its line
// number), so metrics can tell keys apart without showing them; name keys to keep their
// metrics stable across edits of the file.
func ParseKeys(data []byte, prefix string) ([]APIKey, error) {
	var out []APIKey
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		k := APIKey{Key: string(line)}
		if name, key, ok := bytes.Cut(line, []byte(":")); ok {
			k = APIKey{Name: string(bytes.TrimSpace(name)), Key: string(bytes.TrimSpace(key))}
			var err error
			if k.Key, k.Priority, k.BestPriority, err = cutGrant(k.Key); err != nil {
				return nil, fmt.Errorf("clientauth: keys: line %d: %w: %w", i+1, err, ErrInvalidKeys)
			}
			if !validKeyName(k.Name) {
				return nil, fmt.Errorf("clientauth: keys: line %d: the part before ':' must be a name of 1-%d letters, digits, '.', '_' or '-': %w", i+1, MaxKeyNameLen, ErrInvalidKeys)
			}
		} else {
			k.Name = fmt.Sprintf("%s-%d", prefix, i+1)
		}
		if !validKey(k.Key) {
			return nil, fmt.Errorf("clientauth: keys: line %d: a key must be 1-%d printable ASCII characters without spaces: %w", i+1, MaxKeyLen, ErrInvalidKeys)
		}
		out = append(out, k)
	}
	return out, nil
}

// cutGrant splits a trailing ":priority=DEFAULT[/BEST]" off key.
func cutGrant(key string) (rest string, def, best int, err error) {
	i := strings.LastIndex(key, ":priority=")
	if i < 0 {
		return key, 0, 0, nil
	}
	d, b, hasBest := strings.Cut(key[i+len(":priority="):], "/")
	def, err = strconv.Atoi(d)
	best = def
	if err == nil && hasBest {
		best, err = strconv.Atoi(b)
	}
	if err != nil || def < -MaxPriority || def > MaxPriority || best < -MaxPriority || best > def {
		return "", 0, 0, fmt.Errorf("priority=DEFAULT[/BEST] wants integers in [-%d, %d] with BEST ≤ DEFAULT", MaxPriority, MaxPriority)
	}
	return strings.TrimSpace(key[:i]), def, best, nil
}

func validKeyName(s string) bool {
	if len(s) == 0 || len(s) > MaxKeyNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validKey reports whether s can be a key: visible ASCII, which is also what BearerToken
// accepts, so every valid key can be presented.
func validKey(s string) bool {
	if len(s) == 0 || len(s) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// KeySet is an immutable set of named keys that a presented credential is matched against.
// Only SHA-256 digests of the keys are kept. The zero value and nil hold no key. Safe for
// concurrent use.
type KeySet struct {
	names  []string
	sums   [][sha256.Size]byte
	grants []Grant
}

// Grant is a key's admission bands (APIKey.Priority and BestPriority).
type Grant struct {
	Priority, BestPriority int
}

// NewKeySet returns the set of keys, which must be valid (as ParseKeys checks) and unique in
// both name and key.
func NewKeySet(keys []APIKey) (*KeySet, error) {
	s := &KeySet{names: make([]string, 0, len(keys)), sums: make([][sha256.Size]byte, 0, len(keys))}
	for i, k := range keys {
		if !validKeyName(k.Name) || !validKey(k.Key) || k.BestPriority > k.Priority || k.BestPriority < -MaxPriority || k.Priority > MaxPriority {
			return nil, fmt.Errorf("clientauth: keys: key %d (%q): invalid name or key: %w", i+1, safeName(k.Name), ErrInvalidKeys)
		}
		sum := sha256.Sum256([]byte(k.Key))
		for j := range s.sums {
			if s.names[j] == k.Name {
				return nil, fmt.Errorf("clientauth: keys: name %q used twice: %w", k.Name, ErrInvalidKeys)
			}
			if s.sums[j] == sum {
				return nil, fmt.Errorf("clientauth: keys: keys %q and %q are the same key: %w", s.names[j], k.Name, ErrInvalidKeys)
			}
		}
		s.names = append(s.names, k.Name)
		s.sums = append(s.sums, sum)
		s.grants = append(s.grants, Grant{Priority: k.Priority, BestPriority: k.BestPriority})
	}
	return s, nil
}

// safeName returns name when it is a valid name, else a placeholder (an invalid name may be a
// key pasted in the wrong field).
func safeName(name string) string {
	if validKeyName(name) {
		return name
	}
	return "?"
}

// Len returns the number of keys.
func (s *KeySet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.names)
}

// Names returns the keys' names in order.
func (s *KeySet) Names() []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s.names...)
}

// Match returns the name of the key equal to presented. It takes the same time whichever key
// matches, or none, and whatever the keys' lengths: presented is hashed and its digest compared
// with every key's digest in full (subtle.ConstantTimeCompare on equal-length digests), with no
// early exit. What the time depends on is the length of presented, which the caller chose, and
// the number of keys.
func (s *KeySet) Match(presented string) (name string, ok bool) {
	if i := s.index(presented); i >= 0 {
		return s.names[i], true
	}
	return "", false
}

// index returns the position of the key equal to presented, or -1 (see Match).
func (s *KeySet) index(presented string) int {
	if s == nil {
		return -1
	}
	sum := sha256.Sum256([]byte(presented))
	found := -1
	for i := range s.sums {
		eq := subtle.ConstantTimeCompare(sum[:], s.sums[i][:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	return found
}

// BearerToken returns the token of an "Authorization: Bearer TOKEN" header given its values
// (http.Header.Values): exactly one value, the scheme in any case (RFC 9110 §11.1), one or more
// spaces or tabs, then a token of 1 to MaxKeyLen visible ASCII characters with optional trailing
// spaces. Anything else (no header, another scheme, two headers, an empty, overlong or malformed
// token) is not a bearer token.
func BearerToken(values []string) (string, bool) {
	if len(values) != 1 {
		return "", false
	}
	v := values[0]
	const scheme = "bearer"
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) || (v[len(scheme)] != ' ' && v[len(scheme)] != '\t') {
		return "", false
	}
	return visibleToken(strings.TrimLeft(v[len(scheme):], " \t"))
}

// visibleToken trims trailing spaces and tabs from v and accepts what remains when it could be
// a key (validKey): a longer token can match no key, and is not worth hashing.
func visibleToken(v string) (string, bool) {
	v = strings.TrimRight(v, " \t")
	if !validKey(v) {
		return "", false
	}
	return v, true
}

// credential states of a request.
const (
	credMissing   = "missing"   // no Authorization and no api-key header
	credMalformed = "malformed" // a header, but no usable key in it
)

// clientCredential returns the key a request presents: the token of "Authorization: Bearer",
// else the value of an "api-key" header (Azure OpenAI's convention, which some clients
// follow), else the value of an "x-api-key" header (Anthropic's, which its clients send). When
// there is none, problem says whether the request sent nothing or something unusable.
func clientCredential(h httpHeader) (key string, problem string) {
	auth := h.Values("Authorization")
	if tok, ok := BearerToken(auth); ok {
		return tok, ""
	}
	sent := len(auth) > 0
	for _, name := range []string{"Api-Key", "X-Api-Key"} {
		v := h.Values(name)
		if len(v) == 1 {
			if tok, ok := visibleToken(strings.TrimLeft(v[0], " \t")); ok {
				return tok, ""
			}
		}
		sent = sent || len(v) > 0
	}
	if !sent {
		return "", credMissing
	}
	return "", credMalformed
}

// httpHeader is the part of http.Header clientCredential reads.
type httpHeader interface {
	Values(key string) []string
}
