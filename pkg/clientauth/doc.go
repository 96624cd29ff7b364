// Package clientauth is the client side of DESIGN.md §11: who may use the public API, and how
// much. A Guard wraps the API handler; every request but the probes is matched against the
// client keys (when there are any) and then admitted by its key's rate and concurrency limits,
// before the handler sees it.
//
// The name of the key a request was admitted with is in its context (KeyName), for handlers
// that keep per-client state.
//
// Files: keys.go holds the key file format (ParseKeys, with a key's admission bands), the key set matched in constant time
// (KeySet) and the credential parsers (BearerToken; the "api-key" and "x-api-key" headers); guard.go the Guard,
// its key generations and reloads (SetKeys); limits.go the per-key limiters and their metrics.
//
// Keys are never logged, counted or echoed: metrics are labelled by a key's name, error
// messages name lines of a key file, never their content, and a 401 never repeats what the
// request sent.
package clientauth
