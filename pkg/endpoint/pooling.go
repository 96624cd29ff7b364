package endpoint

import (
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// The pooling endpoints vLLM serves (embeddings, pooling, classify, score, rerank) on the
// pipeline: the body is forwarded to an HTTP worker of the request's model as the client sent
// it, model renamed (openai.PassRequest), and the answer relayed. They are routed without
// prefix information (the policy sees no blocks: cache_aware picks the least-loaded worker),
// since a pooling request runs one prefill and keeps nothing a later request could reuse. gRPC
// workers are never chosen for them; a model with only gRPC workers answers a 400 naming the
// endpoint (engine.PassOnGRPC).

// PoolingPaths are the pooling endpoints, each served at the same path by the worker.
var PoolingPaths = []string{"/v1/embeddings", "/pooling", "/classify", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank"}

// Pass returns the endpoint forwarding POST path.
func Pass(path string) *pipeline.Endpoint {
	return &pipeline.Endpoint{
		Parse: func(body []byte, _ openai.Limits, req *engine.Request) (string, *openai.Error) {
			pr, aerr := openai.ParsePass(body, path, openai.Limits{})
			if aerr != nil {
				return "", aerr
			}
			req.Pass = pr
			return pr.Model, nil
		},
		Prompt: func(_ *pipeline.Pipeline, c *pipeline.Call) (string, *openai.Error) {
			c.Req.Tokens = [][]uint32{nil} // routed on no tokens
			return "", nil
		},
		Write: (*pipeline.Pipeline).Relay,
	}
}

// AudioPaths are vLLM's audio endpoints: multipart uploads forwarded the same way, their
// streamed answers (stream=true) relayed event by event. Uploads are bounded by
// --max-body-bytes (413).
var AudioPaths = []string{"/v1/audio/transcriptions", "/v1/audio/translations"}

// Form returns the endpoint forwarding the multipart POST path.
func Form(path string) *pipeline.Endpoint {
	ep := *Pass(path)
	ep.Parse = func(body []byte, _ openai.Limits, req *engine.Request) (string, *openai.Error) {
		pr, aerr := openai.ParseForm(body, req.Header.Get("Content-Type"), path)
		if aerr != nil {
			return "", aerr
		}
		req.Pass = pr
		return pr.Model, nil
	}
	return &ep
}
