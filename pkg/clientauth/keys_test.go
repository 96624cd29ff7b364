package clientauth

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseKeys(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []APIKey
		err  bool
	}{
		{"empty", "", nil, false},
		{"comments and blanks", "# keys\n\n   \n# more\n", nil, false},
		{"bare keys named in order", "sk-one\n  sk-two  \n", []APIKey{{Name: "file-1", Key: "sk-one"}, {Name: "file-2", Key: "sk-two"}}, false},
		{"named", "team-a:sk-aaa\nteam.b : sk-bbb\n", []APIKey{{Name: "team-a", Key: "sk-aaa"}, {Name: "team.b", Key: "sk-bbb"}}, false},
		{"unnamed keys are named by line", "sk-x\nops:sk-y\n\n# c\nsk-z\n", []APIKey{{Name: "file-1", Key: "sk-x"}, {Name: "ops", Key: "sk-y"}, {Name: "file-5", Key: "sk-z"}}, false},
		{"colon in a named key", "n:a:b", []APIKey{{Name: "n", Key: "a:b"}}, false},
		{"crlf", "sk-1\r\nsk-2\r\n", []APIKey{{Name: "file-1", Key: "sk-1"}, {Name: "file-2", Key: "sk-2"}}, false},
		{"grant", "batch:sk-b:priority=10\nfast:sk:f:priority=0/-5\n", []APIKey{{Name: "batch", Key: "sk-b", Priority: 10, BestPriority: 10}, {Name: "fast", Key: "sk:f", Priority: 0, BestPriority: -5}}, false},
		{"grant best above default", "n:k:priority=0/3", nil, true},
		{"grant out of range", "n:k:priority=101", nil, true},
		{"grant not a number", "n:k:priority=high", nil, true},
		{"grant without a key", "n::priority=1", nil, true},
		{"space inside key", "sk one", nil, true},
		{"empty key after name", "name:", nil, true},
		{"empty name", ":sk-1", nil, true},
		{"bad name", "na me:sk-1", nil, true},
		{"non-ascii key", "sk-é", nil, true},
		{"control char", "sk-\x01", nil, true},
		{"too long", strings.Repeat("k", MaxKeyLen+1), nil, true},
		{"longest", strings.Repeat("k", MaxKeyLen), []APIKey{{Name: "file-1", Key: strings.Repeat("k", MaxKeyLen)}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKeys([]byte(tt.in), "file")
			if tt.err {
				if !errors.Is(err, ErrInvalidKeys) {
					t.Fatalf("got %v, %v; want an ErrInvalidKeys error", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("keys (-want +got):\n%s", d)
			}
		})
	}
}

// Errors name the line, never its content.
func TestParseKeysErrorsDoNotEchoKeys(t *testing.T) {
	const secret = "sk-S3CRET-value"
	for _, in := range []string{"ok\n" + secret + " tail", "bad name:" + secret, secret + "\x7f", secret + ":"} {
		_, err := ParseKeys([]byte(in), "file")
		if err == nil {
			t.Fatalf("ParseKeys(%q): got nil error", in)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "S3CRET") {
			t.Errorf("ParseKeys(%q): error %q echoes the key", in, err)
		}
		if !strings.Contains(err.Error(), "line ") {
			t.Errorf("ParseKeys(%q): error %q does not name the line", in, err)
		}
	}
}

func TestNewKeySet(t *testing.T) {
	tests := []struct {
		name string
		keys []APIKey
		err  string
	}{
		{"ok", []APIKey{{Name: "a", Key: "k1"}, {Name: "b", Key: "k2"}}, ""},
		{"none", nil, ""},
		{"duplicate name", []APIKey{{Name: "a", Key: "k1"}, {Name: "a", Key: "k2"}}, "used twice"},
		{"duplicate key", []APIKey{{Name: "a", Key: "k1"}, {Name: "b", Key: "k1"}}, "same key"},
		{"invalid key", []APIKey{{Name: "a", Key: "has space"}}, "invalid"},
		{"invalid name", []APIKey{{Name: "sk-looks-like-a-key with space", Key: "k"}}, "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ks, err := NewKeySet(tt.keys)
			if tt.err == "" {
				if err != nil || ks.Len() != len(tt.keys) {
					t.Fatalf("got %d keys, %v; want %d and no error", ks.Len(), err, len(tt.keys))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalidKeys) {
				t.Fatalf("got %v, want an error containing %q", err, tt.err)
			}
			if strings.Contains(err.Error(), "with space") {
				t.Errorf("error %q repeats an invalid name, which may be a key", err)
			}
		})
	}
}

func TestKeySetMatch(t *testing.T) {
	ks, err := NewKeySet([]APIKey{{Name: "short", Key: "a"}, {Name: "long", Key: strings.Repeat("z", 300)}, {Name: "team", Key: "sk-team-key"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		presented, name string
		ok              bool
	}{
		{"a", "short", true},
		{strings.Repeat("z", 300), "long", true},
		{"sk-team-key", "team", true},
		{"sk-team-ke", "", false},
		{"sk-team-key ", "", false},
		{"A", "", false},
		{"", "", false},
		{strings.Repeat("z", 299), "", false},
	}
	for _, tt := range tests {
		name, ok := ks.Match(tt.presented)
		if name != tt.name || ok != tt.ok {
			t.Errorf("Match(%.20q): got %q, %v; want %q, %v", tt.presented, name, ok, tt.name, tt.ok)
		}
	}
	var empty *KeySet
	if _, ok := empty.Match("a"); ok || empty.Len() != 0 {
		t.Error("nil KeySet: got a match, want none")
	}
}

func TestBearerToken(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   string
		ok     bool
	}{
		{"plain", []string{"Bearer sk-1"}, "sk-1", true},
		{"scheme case", []string{"bEaReR sk-1"}, "sk-1", true},
		{"several spaces and a tab", []string{"Bearer \t  sk-1  "}, "sk-1", true},
		{"token68 padding", []string{"Bearer abc+/=="}, "abc+/==", true},
		{"none", nil, "", false},
		{"two headers", []string{"Bearer a", "Bearer b"}, "", false},
		{"basic", []string{"Basic dXNlcjpwYXNz"}, "", false},
		{"no space", []string{"Bearersk-1"}, "", false},
		{"scheme only", []string{"Bearer"}, "", false},
		{"scheme and spaces", []string{"Bearer   "}, "", false},
		{"space inside", []string{"Bearer sk 1"}, "", false},
		{"non-ascii", []string{"Bearer sk-é"}, "", false},
		{"prefix of scheme", []string{"Bear sk-1"}, "", false},
		{"longest key", []string{"Bearer " + strings.Repeat("k", MaxKeyLen)}, strings.Repeat("k", MaxKeyLen), true},
		{"longer than any key", []string{"Bearer " + strings.Repeat("k", MaxKeyLen+1)}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := BearerToken(tt.values)
			if got != tt.want || ok != tt.ok {
				t.Errorf("BearerToken(%q): got %q, %v; want %q, %v", tt.values, got, ok, tt.want, tt.ok)
			}
		})
	}
}

type headerMap map[string][]string

func (h headerMap) Values(k string) []string { return h[k] }

func TestClientCredential(t *testing.T) {
	tests := []struct {
		name    string
		h       headerMap
		key     string
		problem string
	}{
		{"bearer", headerMap{"Authorization": {"Bearer k1"}}, "k1", ""},
		{"api-key", headerMap{"Api-Key": {"k2"}}, "k2", ""},
		{"bearer wins", headerMap{"Authorization": {"Bearer k1"}, "Api-Key": {"k2"}}, "k1", ""},
		{"basic then api-key", headerMap{"Authorization": {"Basic x"}, "Api-Key": {"k2"}}, "k2", ""},
		{"nothing", headerMap{}, "", credMissing},
		{"basic only", headerMap{"Authorization": {"Basic x"}}, "", credMalformed},
		{"empty api-key", headerMap{"Api-Key": {""}}, "", credMalformed},
		{"two api-keys", headerMap{"Api-Key": {"a", "b"}}, "", credMalformed},
		{"x-api-key", headerMap{"X-Api-Key": {"k3"}}, "k3", ""},
		{"bearer wins over x-api-key", headerMap{"Authorization": {"Bearer k1"}, "X-Api-Key": {"k3"}}, "k1", ""},
		{"api-key wins over x-api-key", headerMap{"Api-Key": {"k2"}, "X-Api-Key": {"k3"}}, "k2", ""},
		{"malformed api-key, then x-api-key", headerMap{"Api-Key": {""}, "X-Api-Key": {"k3"}}, "k3", ""},
		{"empty x-api-key", headerMap{"X-Api-Key": {" "}}, "", credMalformed},
		{"two x-api-keys", headerMap{"X-Api-Key": {"a", "b"}}, "", credMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, problem := clientCredential(tt.h)
			if key != tt.key || problem != tt.problem {
				t.Errorf("got %q, %q; want %q, %q", key, problem, tt.key, tt.problem)
			}
		})
	}
}
