package clientauth

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestKeyGrant: the handler behind the guard sees the bands of the key the request presented,
// and none without keys.
func TestKeyGrant(t *testing.T) {
	keys, err := ParseKeys([]byte("batch:sk-b:priority=10\nops:sk-o:priority=0/-3\nplain:sk-p\n"), "file")
	if err != nil {
		t.Fatal(err)
	}
	ks, err := NewKeySet(keys)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		keys   *KeySet
		bearer string
		want   Grant
		wantOK bool
	}{
		{"batch", ks, "sk-b", Grant{Priority: 10, BestPriority: 10}, true},
		{"ops", ks, "sk-o", Grant{Priority: 0, BestPriority: -3}, true},
		{"no grant", ks, "sk-p", Grant{}, true},
		{"no keys", nil, "", Grant{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := New(Config{Keys: tt.keys})
			if err != nil {
				t.Fatal(err)
			}
			var got Grant
			var ok bool
			h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, ok = KeyGrant(r.Context()) }))
			r := httptest.NewRequest("POST", "/v1/completions", nil)
			if tt.bearer != "" {
				r.Header.Set("Authorization", "Bearer "+tt.bearer)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != http.StatusOK || got != tt.want || ok != tt.wantOK {
				t.Fatalf("got status %d grant %+v ok %v, want 200 %+v %v", rec.Code, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
