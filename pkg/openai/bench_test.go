package openai

import (
	"encoding/json"
	"strconv"
	"testing"
)

// tokenBody returns a completion body with an n-token token-id prompt, the reference workload's
// request shape.
func tokenBody(n int) []byte {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(1000 + 37*i%150000)
	}
	b := []byte(`{"model":"m","max_tokens":1,"prompt":`)
	b = AppendTokenArray(b, ids)
	return append(b, '}')
}

// BenchmarkParseCompletion is decoding and validating a body with a 1000-token token-id prompt,
// and re-encoding it for a worker.
func BenchmarkParseCompletion(b *testing.B) {
	body := tokenBody(1000)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		req, err := ParseCompletion(body, Limits{MaxN: 16})
		if err != nil {
			b.Fatal(err)
		}
		_ = req.AppendUpstream(make([]byte, 0, len(body)+64), "m", nil, nil)
	}
}

// BenchmarkScanObject compares the hand-written top-level scanner with encoding/json decoding
// the same body into the same map of raw members (what ParseCompletion needs), on a 1000-token
// token-id prompt and on a text prompt of similar size.
func BenchmarkScanObject(b *testing.B) {
	text := []byte(`{"model":"m","max_tokens":16,"temperature":0.7,"prompt":` + strconv.Quote(loremText(6000)) + `}`)
	for _, in := range []struct {
		name string
		body []byte
	}{{"tokens=1000", tokenBody(1000)}, {"text=6KB", text}} {
		b.Run(in.name+"/scanner", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in.body)))
			for b.Loop() {
				raw := make(map[string]json.RawMessage, 8)
				if err := scanObject(in.body, func(k string, v []byte) { raw[k] = v }); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(in.name+"/encoding_json", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in.body)))
			for b.Loop() {
				raw := make(map[string]json.RawMessage, 8)
				if err := json.Unmarshal(in.body, &raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func loremText(n int) string {
	const words = "the gateway sends each request to the worker whose cache already holds the longest prefix "
	out := make([]byte, 0, n)
	for len(out) < n {
		out = append(out, words...)
	}
	return string(out[:n])
}
