package clientauth

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// FuzzBearerToken checks the Authorization parser: it never panics, a token it returns is
// non-empty visible ASCII taken from the header, the canonical form parses back to the same
// token, and the request-level parser agrees with it.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer sk-1", "bearer   sk-1 \t", "Bearer", "Bearer ", "Basic dXNlcg==", "Bearersk", "BEARER a=b+/", "Bearer \x00", "Bearer é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, ok := BearerToken([]string{s})
		if !ok {
			if tok != "" {
				t.Fatalf("BearerToken(%q): got %q with ok false", s, tok)
			}
			return
		}
		if !validKey(tok) || !strings.Contains(s, tok) {
			t.Fatalf("BearerToken(%q): got %q, not a visible-ASCII token from the header", s, tok)
		}
		if again, ok := BearerToken([]string{"Bearer " + tok}); !ok || again != tok {
			t.Fatalf("canonical form of %q: got %q, %v", tok, again, ok)
		}
		if key, problem := clientCredential(headerMap{"Authorization": {s}}); key != tok || problem != "" {
			t.Fatalf("clientCredential(%q): got %q, %q; want %q", s, key, problem, tok)
		}
	})
}

// keyErrorShapes are the messages ParseKeys may fail with once line numbers are masked: fixed
// texts, so no part of the input can appear in them.
var keyErrorShapes = map[string]bool{
	"clientauth: keys: line N: the part before ':' must be a name of N-N letters, digits, '.', '_' or '-': invalid client keys": true,
	"clientauth: keys: line N: a key must be N-N printable ASCII characters without spaces: invalid client keys":                true,
	"clientauth: keys: line N: priority=DEFAULT[/BEST] wants integers in [-N, N] with BEST ≤ DEFAULT: invalid client keys":      true,
}

var digits = regexp.MustCompile(`[0-9]+`)

// FuzzParseKeys checks the key file parser: it never panics, fails only with the fixed
// messages, returns only valid names and keys, and a set built from them matches each key to
// its own name.
func FuzzParseKeys(f *testing.F) {
	for _, s := range []string{"sk-1\nsk-2\n", "# c\n\nteam:sk-a\r\n", "a:b:c", ":x", "x:", "bad name:k", "k k", "n:k:priority=5/-2", "n:k:priority=x", "\xff", strings.Repeat("k", MaxKeyLen+1)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := ParseKeys(data, "file")
		if err != nil {
			if !errors.Is(err, ErrInvalidKeys) || !keyErrorShapes[digits.ReplaceAllString(err.Error(), "N")] {
				t.Fatalf("ParseKeys(%q): unexpected error %q", data, err)
			}
			return
		}
		for _, k := range keys {
			if !validKeyName(k.Name) || !validKey(k.Key) {
				t.Fatalf("ParseKeys(%q): returned invalid %q / %q", data, k.Name, k.Key)
			}
		}
		ks, err := NewKeySet(keys)
		if err != nil {
			if !errors.Is(err, ErrInvalidKeys) {
				t.Fatalf("NewKeySet: %v", err)
			}
			return
		}
		for _, k := range keys {
			if name, ok := ks.Match(k.Key); !ok || name != k.Name {
				t.Fatalf("Match(key of %q): got %q, %v", k.Name, name, ok)
			}
		}
	})
}
