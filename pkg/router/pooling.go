package router

import (
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
)

// The pooling endpoints vLLM serves (embeddings, pooling, classify, score, rerank) on the
// pipeline: the body is forwarded to an HTTP worker of the request's model as the client sent
// it, model renamed (openai.PassRequest), and the answer relayed. They are routed without
// prefix information (the policy sees no blocks: cache_aware picks the least-loaded worker),
// since a pooling request runs one prefill and keeps nothing a later request could reuse. gRPC
// workers are never chosen for them; a model with only gRPC workers answers a 400 naming the
// endpoint (engine.PassOnGRPC).

// poolingPaths are the pooling endpoints, each served at the same path by the worker.
var poolingPaths = []string{"/v1/embeddings", "/pooling", "/classify", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank"}

// passEndpoint returns the endpoint forwarding POST path.
func passEndpoint(path string) *endpoint {
	return &endpoint{
		parse: func(body []byte, _ openai.Limits, req *engine.Request) (string, *openai.Error) {
			pr, aerr := openai.ParsePass(body, path, openai.Limits{})
			if aerr != nil {
				return "", aerr
			}
			req.Pass = pr
			return pr.Model, nil
		},
		prompt: func(_ *Router, c *call) (string, *openai.Error) {
			c.req.Tokens = [][]uint32{nil} // routed on no tokens
			return "", nil
		},
		write: (*Router).relay,
	}
}

// audioPaths are vLLM's audio endpoints: multipart uploads forwarded the same way, their
// streamed answers (stream=true) relayed event by event. Uploads are bounded by
// --max-body-bytes (413).
var audioPaths = []string{"/v1/audio/transcriptions", "/v1/audio/translations"}

// formEndpoint returns the endpoint forwarding the multipart POST path.
func formEndpoint(path string) *endpoint {
	ep := *passEndpoint(path)
	ep.parse = func(body []byte, _ openai.Limits, req *engine.Request) (string, *openai.Error) {
		pr, aerr := openai.ParseForm(body, req.Header.Get("Content-Type"), path)
		if aerr != nil {
			return "", aerr
		}
		req.Pass = pr
		return pr.Model, nil
	}
	return &ep
}
