package sim

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRequireAPIKey(t *testing.T) {
	h := RequireAPIKey(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), "sk-sim")
	tests := []struct {
		path, auth string
		want       int
	}{
		{"/v1/completions", "", 401},
		{"/v1/completions", "Bearer wrong", 401},
		{"/v1/completions", "Basic sk-sim", 401},
		{"/v1/completions", "Bearer sk-sim", 200},
		{"/v1/models", "bearer sk-sim", 200},
		{"/v1/models", "", 401},
		{"/health", "", 200},
		{"/metrics", "", 200},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, tt.path, nil)
		if tt.auth != "" {
			r.Header.Set("Authorization", tt.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.want {
			t.Errorf("%s with %q: got %d, want %d", tt.path, tt.auth, w.Code, tt.want)
		}
		if w.Code == 401 && w.Body.String() != `{"error":"Unauthorized"}` {
			t.Errorf("401 body: got %s, want vLLM's", w.Body.String())
		}
	}
}
