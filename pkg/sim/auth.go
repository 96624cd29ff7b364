package sim

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The simulator's --api-key, as vLLM's: a request to a /v1 path must carry
// "Authorization: Bearer <key>" (scheme in any case) or it gets 401 {"error": "Unauthorized"};
// /health, /metrics and the simulator's own endpoints stay open, as in vLLM's
// AuthenticationMiddleware. Keys are compared as SHA-256 digests, as vLLM does.

// bearerOK reports whether an Authorization value carries key.
func bearerOK(value string, want [sha256.Size]byte) bool {
	scheme, tok, _ := strings.Cut(value, " ")
	if !strings.EqualFold(scheme, "bearer") {
		return false
	}
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// RequireAPIKey wraps h so that /v1 requests need key, as vLLM's --api-key. An empty key
// returns h.
func RequireAPIKey(h http.Handler, key string) http.Handler {
	if key == "" {
		return h
	}
	want := sha256.Sum256([]byte(key))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodOptions && strings.HasPrefix(r.URL.Path, "/v1") && !bearerOK(r.Header.Get("Authorization"), want) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"Unauthorized"}`))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// APIKeyServerOptions require key as "authorization: Bearer <key>" metadata on every gRPC
// call (UNAUTHENTICATED otherwise), the gRPC form of --api-key. An empty key adds nothing.
func APIKeyServerOptions(key string) []grpc.ServerOption {
	if key == "" {
		return nil
	}
	want := sha256.Sum256([]byte(key))
	check := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		for _, v := range md.Get("authorization") {
			if bearerOK(v, want) {
				return nil
			}
		}
		return status.Error(codes.Unauthenticated, "Unauthorized")
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			if err := check(ctx); err != nil {
				return nil, err
			}
			return next(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
			if err := check(ss.Context()); err != nil {
				return err
			}
			return next(srv, ss)
		}),
	}
}
