package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/sglang"
	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// Prefill/decode pairs of grpc:// workers (pd_legs.go; wire/pd.md §5): the same flows as the
// HTTP pairs, with the transfer in Generate fields.

// The prefill leg's kv_transfer_params_json (pipeline's nixlPrefillParams).
const grpcNIXLPrefillParams = `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`

// vllmPrefill answers like a vLLM NIXL prefill: one token and, when params is set, the
// hand-off in GenerateComplete field 12.
func vllmPrefill(params string) func(*vllm.GenerateRequest, grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
	return func(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
		c := &vllm.GenerateComplete{OutputIds: []uint32{'x'}, FinishReason: "length", PromptTokens: uint32(len(r.GetTokenized().GetInputIds())), CompletionTokens: 1}
		if params != "" {
			c.KvTransferParamsJson = &params
		}
		return s.Send(&vllm.GenerateResponse{Response: &vllm.GenerateResponse_Complete{Complete: c}})
	}
}

func failing(code codes.Code) func(*vllm.GenerateRequest, grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
	return func(*vllm.GenerateRequest, grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
		return status.Error(code, "KV transfer failed")
	}
}

// grpcPDGateway starts a gateway over a prefill and a decode vLLM servicer.
func grpcPDGateway(t *testing.T, pd pipeline.PD, p, d *fakeVLLM) (g *testGateway, purl, durl string) {
	t.Helper()
	purl = "grpc://" + startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, p) })
	durl = "grpc://" + startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, d) })
	return newTestGateway(t, testConfig{PD: pd}, "url="+purl+",runtime=vllm,role=prefill", "url="+durl+",runtime=vllm,role=decode"), purl, durl
}

func TestPDGRPCNIXLPair(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			p, d := newFakeVLLM(), newFakeVLLM()
			p.gen, d.gen = vllmPrefill(nixlParams), echoUpper
			g, purl, durl := grpcPDGateway(t, pipeline.PD{MinUncachedTokens: -1}, p, d)
			resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":20,"min_tokens":5,"stop":["q"],"stream":%v}`, longPrompt, stream))
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, "ABCDEFGHIJ") && !strings.Contains(body, `"text":"J"`) {
				t.Fatalf("got %d %s, want 200 with the decode answer", resp.StatusCode, body)
			}
			pr, dr := <-p.reqs, <-d.reqs
			sp := pr.GetSamplingParams()
			if pr.GetKvTransferParamsJson() != grpcNIXLPrefillParams || sp.GetMaxTokens() != 1 || sp.GetMinTokens() != 0 || pr.Stream || len(sp.Stop) != 0 || !sp.IgnoreEos {
				t.Errorf("prefill leg: field 8 %q, max_tokens %d, min_tokens %d, stream %v, stop %v, ignore_eos %v; want the NIXL flags, 1, 0, false, none, true",
					pr.GetKvTransferParamsJson(), sp.GetMaxTokens(), sp.GetMinTokens(), pr.Stream, sp.Stop, sp.IgnoreEos)
			}
			if got := dr.GetKvTransferParamsJson(); got != nixlParams {
				t.Errorf("decode field 8: got %q, want the prefill's field 12 verbatim %q", got, nixlParams)
			}
			if dr.GetSamplingParams().GetMaxTokens() != 20 || !cmp.Equal(dr.GetSamplingParams().Stop, []string{"q"}) || dr.Stream != stream {
				t.Errorf("decode leg is not the client's request: %v", dr.GetSamplingParams())
			}
			if !cmp.Equal(pr.GetTokenized().GetInputIds(), dr.GetTokenized().GetInputIds()) || len(dr.GetTokenized().GetInputIds()) != 300 {
				t.Errorf("legs' input ids differ or are not the prompt's 300")
			}
			if resp.Header.Get(pipeline.HeaderPD) != pdPair || resp.Header.Get(pipeline.HeaderPrefillWorker) != purl || resp.Header.Get(pipeline.HeaderWorker) != durl {
				t.Errorf("headers %v: want a pair, prefill %s, decode %s", resp.Header, purl, durl)
			}
		})
	}
}

func TestPDGRPCNIXLFailures(t *testing.T) {
	t.Run("prefill_failed", func(t *testing.T) {
		p, d := newFakeVLLM(), newFakeVLLM()
		p.gen, d.gen = failing(codes.Internal), echoUpper
		g, _, durl := grpcPDGateway(t, pipeline.PD{MinUncachedTokens: -1}, p, d)
		resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":4}`, longPrompt))
		if resp.StatusCode != http.StatusOK || resp.Header.Get(pipeline.HeaderPD) != pdPrefillFailed || resp.Header.Get(pipeline.HeaderWorker) != durl {
			t.Fatalf("got %d %v %s, want 200 run whole on the decode worker, prefill_failed", resp.StatusCode, resp.Header, body)
		}
		if dr := <-d.reqs; dr.KvTransferParamsJson != nil {
			t.Errorf("whole run carries field 8 %q", dr.GetKvTransferParamsJson())
		}
	})
	t.Run("transfer_failed", func(t *testing.T) {
		p, d := newFakeVLLM(), newFakeVLLM()
		p.gen = vllmPrefill(nixlParams)
		d.gen = func(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
			if r.KvTransferParamsJson != nil {
				return status.Error(codes.Internal, "KV transfer failed")
			}
			return echoUpper(r, s)
		}
		g, _, durl := grpcPDGateway(t, pipeline.PD{MinUncachedTokens: -1}, p, d)
		resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":4}`, longPrompt))
		if resp.StatusCode != http.StatusOK || resp.Header.Get(pipeline.HeaderPD) != pdTransferFailed || resp.Header.Get(pipeline.HeaderWorker) != durl || !strings.Contains(body, "ABC") {
			t.Fatalf("got %d %v %s, want 200 run whole on the decode worker, transfer_failed", resp.StatusCode, resp.Header, body)
		}
		first, second := <-d.reqs, <-d.reqs
		if first.GetKvTransferParamsJson() != nixlParams || second.KvTransferParamsJson != nil {
			t.Errorf("decode calls: field 8 %q then %q, want the hand-off then none", first.GetKvTransferParamsJson(), second.GetKvTransferParamsJson())
		}
	})
	t.Run("invalid_argument", func(t *testing.T) {
		// The prefill engine's verdict on the request is the client's answer, as an HTTP
		// prefill's 4xx.
		p, d := newFakeVLLM(), newFakeVLLM()
		p.gen, d.gen = failing(codes.InvalidArgument), echoUpper
		g, purl, _ := grpcPDGateway(t, pipeline.PD{MinUncachedTokens: -1}, p, d)
		resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":4}`, longPrompt))
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(pipeline.HeaderPrefillWorker) != purl {
			t.Fatalf("got %d %v %s, want the prefill's 400", resp.StatusCode, resp.Header, body)
		}
		select {
		case r := <-d.reqs:
			t.Errorf("the decode worker got a call %v", r)
		default:
		}
	})
}

func TestPDGRPCSGLangPair(t *testing.T) {
	p := &fakeSGLang{reqs: make(chan *sglang.GenerateRequest, 4), got: make(chan struct{})}
	d := &fakeSGLang{reqs: make(chan *sglang.GenerateRequest, 4), after: p}
	paddr := startGRPC(t, func(s *grpc.Server) { sglang.RegisterSglangSchedulerServer(s, p) })
	daddr := startGRPC(t, func(s *grpc.Server) { sglang.RegisterSglangSchedulerServer(s, d) })
	g := newTestGateway(t, testConfig{PD: pipeline.PD{MinUncachedTokens: -1}},
		"url=grpc://"+paddr+",runtime=sglang,role=prefill,bootstrap_port=9001", "url=grpc://"+daddr+",runtime=sglang,role=decode")
	resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":4,"stream":true}`, longPrompt))
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "xyz") && !strings.Contains(body, `"x"`) {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	pr, dr := <-p.reqs, <-d.reqs
	pp, dp := pr.GetDisaggregatedParams(), dr.GetDisaggregatedParams()
	if pp == nil || dp == nil || pp.BootstrapHost != "127.0.0.1" || pp.BootstrapPort != 9001 || pp.BootstrapRoom < 0 || int64(pp.BootstrapRoom) >= engine.SGLangRoomLimit {
		t.Fatalf("disaggregated_params: prefill %v, decode %v; want the prefill worker's host, port 9001, a room", pp, dp)
	}
	if pp.BootstrapHost != dp.BootstrapHost || pp.BootstrapPort != dp.BootstrapPort || pp.BootstrapRoom != dp.BootstrapRoom {
		t.Errorf("legs name different rooms: prefill %v, decode %v", pp, dp)
	}
	if resp.Header.Get(pipeline.HeaderPD) != pdPair || resp.Header.Get(pipeline.HeaderPrefillWorker) != "grpc://"+paddr || resp.Header.Get(pipeline.HeaderWorker) != "grpc://"+daddr {
		t.Errorf("headers %v: want a pair", resp.Header)
	}
}

func TestPDGRPCRuntimeNotSupported(t *testing.T) {
	// SGLang servicers cannot carry NIXL's kv_transfer_params_json.
	p, d := &fakeSGLang{reqs: make(chan *sglang.GenerateRequest, 4)}, &fakeSGLang{reqs: make(chan *sglang.GenerateRequest, 4)}
	paddr := startGRPC(t, func(s *grpc.Server) { sglang.RegisterSglangSchedulerServer(s, p) })
	daddr := startGRPC(t, func(s *grpc.Server) { sglang.RegisterSglangSchedulerServer(s, d) })
	g := newTestGateway(t, testConfig{PD: pipeline.PD{MinUncachedTokens: -1, Transfer: pipeline.PDTransferNIXL}},
		"url=grpc://"+paddr+",runtime=sglang,role=prefill", "url=grpc://"+daddr+",runtime=sglang,role=decode")
	resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":4}`, longPrompt))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"runtime_pd_not_supported"`) || resp.Header.Get(pipeline.HeaderPD) != "runtime_pd_not_supported" {
		t.Fatalf("got %d %v %s, want 400 runtime_pd_not_supported", resp.StatusCode, resp.Header, body)
	}
	select {
	case r := <-p.reqs:
		t.Errorf("the prefill worker got a call %v", r)
	case r := <-d.reqs:
		t.Errorf("the decode worker got a call %v", r)
	default:
	}
	if got := g.metricValue(t, "kvgate_pd_requests_total", "outcome", "runtime_pd_not_supported"); got != 1 {
		t.Errorf("runtime_pd_not_supported count %v, want 1", got)
	}
}

// A Mooncake pair of grpc:// vLLM workers: both legs carry the parameters in
// kv_transfer_params_json (field 8), the prefill leg NIXL's one-token settings, and, when the
// bootstrap server answers per DP rank, data_parallel_rank (field 9) pinning it to rank 0.
func TestPDGRPCMooncakePair(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		rank        *int32
	}{
		{"one rank", `{"0":{"engine_id":"eng-1"}}`, nil},
		{"dp ranks", `{"1":{"engine_id":"eng-r1"},"0":{"engine_id":"eng-r0"}}`, new(int32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The decode servicer answers once the prefill leg has arrived, as a Mooncake decode
			// engine waits for the KV push (else the pair's end could cancel the prefill leg
			// before it is sent).
			p, d := newFakeVLLM(), newFakeVLLM()
			pushed := make(chan struct{}, 4)
			p.gen = func(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
				pushed <- struct{}{}
				return vllmPrefill("")(r, s)
			}
			d.gen = func(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
				select {
				case <-pushed:
				case <-s.Context().Done():
					return s.Context().Err()
				}
				return echoUpper(r, s)
			}
			b := newFakeBootstrap(t, http.StatusOK, tc.query)
			purl := "grpc://" + startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, p) })
			durl := "grpc://" + startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, d) })
			g := newTestGateway(t, testConfig{PD: pipeline.PD{MinUncachedTokens: -1, Transfer: pipeline.PDTransferMooncake, Timeout: 2 * time.Second}},
				"url="+purl+",runtime=vllm,role=prefill,bootstrap_port="+b.port(), "url="+durl+",runtime=vllm,role=decode")
			resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":20}`, longPrompt))
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, "ABCDEFGHIJ") {
				t.Fatalf("got %d %s, want 200 with the decode answer", resp.StatusCode, body)
			}
			if got := resp.Header.Get(pipeline.HeaderPD); got != pdPair {
				t.Fatalf("outcome %q, want a pair", got)
			}
			var pr, dr *vllm.GenerateRequest
			for _, c := range []struct {
				ch  chan *vllm.GenerateRequest
				out **vllm.GenerateRequest
			}{{p.reqs, &pr}, {d.reqs, &dr}} {
				select {
				case *c.out = <-c.ch:
				case <-time.After(5 * time.Second):
					t.Fatal("a leg never reached its worker")
				}
			}
			var pkv, dkv map[string]any
			if err := json.Unmarshal([]byte(pr.GetKvTransferParamsJson()), &pkv); err != nil {
				t.Fatalf("prefill field 8 %q: %v", pr.GetKvTransferParamsJson(), err)
			}
			if err := json.Unmarshal([]byte(dr.GetKvTransferParamsJson()), &dkv); err != nil {
				t.Fatalf("decode field 8 %q: %v", dr.GetKvTransferParamsJson(), err)
			}
			id, _ := pkv["transfer_id"].(string)
			if !transferIDRe.MatchString(id) || pkv["do_remote_decode"] != true || pkv["do_remote_prefill"] != false || len(pkv) != 3 {
				t.Errorf("prefill field 8 %v: want do_remote_decode and a minted transfer_id", pkv)
			}
			engineID := "eng-1"
			if tc.rank != nil {
				engineID = "eng-r0"
			}
			want := map[string]any{"do_remote_decode": false, "do_remote_prefill": true, "transfer_id": id,
				"remote_engine_id": engineID, "remote_bootstrap_addr": "http://127.0.0.1:" + b.port()}
			if !cmp.Equal(dkv, want) {
				t.Errorf("decode field 8 %v, want %v", dkv, want)
			}
			if sp := pr.GetSamplingParams(); sp.GetMaxTokens() != 1 || pr.Stream || !sp.IgnoreEos {
				t.Errorf("prefill leg: max_tokens %d, stream %v, ignore_eos %v; want NIXL's prefill settings", sp.GetMaxTokens(), pr.Stream, sp.IgnoreEos)
			}
			if !cmp.Equal(pr.DataParallelRank, tc.rank) || dr.DataParallelRank != nil {
				t.Errorf("data_parallel_rank: prefill %v, decode %v; want %v and none", pr.DataParallelRank, dr.DataParallelRank, tc.rank)
			}
			if dr.GetSamplingParams().GetMaxTokens() != 20 {
				t.Errorf("decode leg is not the client's request: %v", dr.GetSamplingParams())
			}
			if resp.Header.Get(pipeline.HeaderPD) != pdPair || resp.Header.Get(pipeline.HeaderPrefillWorker) != purl || resp.Header.Get(pipeline.HeaderWorker) != durl {
				t.Errorf("headers %v: want a pair, prefill %s, decode %s", resp.Header, purl, durl)
			}
		})
	}
}
