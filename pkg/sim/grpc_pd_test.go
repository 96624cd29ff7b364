package sim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/sglang"
	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/worker"
)

// Pair roles over gRPC (grpc_pd.go; wire/pd.md §§5, 7.4): the HTTP pair tests' claims for
// Generate legs, with the side channel and bootstrap server of the HTTP server whose pair
// state the gRPC server shares.

// grpcConn serves env's ranks over gRPC for runtime, with env's HTTP server's pair role.
func (env *testEnv) grpcConn(t *testing.T, rt worker.Runtime) *grpc.ClientConn {
	t.Helper()
	gs, err := NewGRPCServer(GRPCConfig{Runtime: rt, Model: "sim-model", Pairs: env.s}, env.ranks, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	gs.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop(); wg.Wait() })
	return conn
}

// vllmPD is a vLLM Generate of prompt with field 8 set to kv (nil: unset).
func vllmPD(prompt []uint32, maxTokens uint32, stream bool, kv *string) *vllm.GenerateRequest {
	return &vllm.GenerateRequest{RequestId: "pd-1", Stream: stream, KvTransferParamsJson: kv,
		Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: prompt}},
		SamplingParams: &vllm.SamplingParams{MaxTokens: u32p(maxTokens)}}
}

// vllmErr runs a vLLM Generate that must fail and returns its error.
func vllmErr(t *testing.T, c vllm.VllmEngineClient, req *vllm.GenerateRequest) error {
	t.Helper()
	st, err := c.Generate(testCtx(t), req)
	if err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				t.Fatal("Generate succeeded, want a failure")
			}
			return err
		}
	}
}

func TestGRPCPDNIXLPair(t *testing.T) {
	p, d, agg := pdTrio(t, PDTransferNIXL, 0)
	pc := vllm.NewVllmEngineClient(p.grpcConn(t, worker.RuntimeVLLM))
	dc := vllm.NewVllmEngineClient(d.grpcConn(t, worker.RuntimeVLLM))
	ac := vllm.NewVllmEngineClient(agg.grpcConn(t, worker.RuntimeVLLM))
	prompt := seqTokens(1, 101)

	flags := `{"do_remote_decode":true,"do_remote_prefill":false}`
	_, pcs := vllmCollect(t, pc, vllmPD(prompt, 1, false, &flags))
	kv := pcs[0].GetKvTransferParamsJson()
	var params map[string]any
	if err := json.Unmarshal([]byte(kv), &params); err != nil {
		t.Fatalf("prefill complete %v: field 12 %q is not a JSON object", pcs[0], kv)
	}
	u, _ := url.Parse(p.srv.URL)
	if params["do_remote_prefill"] != true || params["remote_host"] != u.Hostname() || strconv.Itoa(int(params["remote_port"].(float64))) != u.Port() ||
		len(params["remote_block_ids"].([]any)[0].([]any)) != 7 || params["remote_request_id"] == "" || pcs[0].FinishReason != "length" {
		t.Errorf("prefill hand-off %v: want do_remote_prefill, the HTTP side channel, 7 held blocks, a request id", params)
	}
	if got := usedBlocks(p.ranks[0]); got != 7 {
		t.Errorf("prefill holds %d blocks, want 7 until the decode server reads them", got)
	}

	_, want := vllmCollect(t, ac, vllmPD(prompt, 8, false, nil))
	_, got := vllmCollect(t, dc, vllmPD(prompt, 8, false, &kv))
	if diff := cmp.Diff(want[0].GetOutputIds(), got[0].GetOutputIds()); diff != "" || len(got[0].GetOutputIds()) != 8 {
		t.Errorf("decode output differs from the aggregated one (-agg +decode):\n%s", diff)
	}
	if got[0].GetKvTransferParamsJson() != "" {
		t.Errorf("decode complete carries a hand-off %q", got[0].GetKvTransferParamsJson())
	}
	if n := usedBlocks(p.ranks[0]); n != 0 {
		t.Errorf("prefill still holds %d blocks after the read", n)
	}
	if n := storedTokens(d.sink); n != 96 {
		t.Errorf("decode server stored %d tokens' blocks, want the prompt's 6 full blocks (96 tokens)", n)
	}
	// The read released the lease: the same hand-off again cannot transfer, and the failure is
	// the request's (INTERNAL), not the engine's (UNAVAILABLE).
	if err := vllmErr(t, dc, vllmPD(prompt, 8, false, &kv)); status.Code(err) != codes.Internal {
		t.Errorf("second read: got %v, want INTERNAL KV transfer failed", err)
	}

	// Streamed decode after a second prefill: the same tokens as the aggregated stream.
	_, pcs = vllmCollect(t, pc, vllmPD(prompt, 1, false, &flags))
	kv = pcs[0].GetKvTransferParamsJson()
	wantChunks, _ := vllmCollect(t, ac, vllmPD(prompt, 8, true, nil))
	gotChunks, _ := vllmCollect(t, dc, vllmPD(prompt, 8, true, &kv))
	if diff := cmp.Diff(wantChunks[0], gotChunks[0]); diff != "" {
		t.Errorf("streamed decode differs from the aggregated stream (-agg +decode):\n%s", diff)
	}
}

func TestGRPCPDNIXLBadInput(t *testing.T) {
	p, _, _ := pdTrio(t, PDTransferNIXL, 0)
	c := vllm.NewVllmEngineClient(p.grpcConn(t, worker.RuntimeVLLM))
	for _, kv := range []string{"", "[1]", "null", `{"do_remote_decode":`} {
		if err := vllmErr(t, c, vllmPD(seqTokens(1, 40), 1, false, &kv)); status.Code(err) != codes.InvalidArgument {
			t.Errorf("kv_transfer_params_json %q: got %v, want INVALID_ARGUMENT", kv, err)
		}
	}
	// Without do_remote_decode: an ordinary request, no hand-off, nothing held.
	flags := `{"do_remote_decode":false}`
	_, cs := vllmCollect(t, c, vllmPD(seqTokens(1, 101), 2, false, &flags))
	if cs[0].KvTransferParamsJson != nil || usedBlocks(p.ranks[0]) != 0 {
		t.Errorf("plain request: hand-off %v, %d blocks held; want none", cs[0].KvTransferParamsJson, usedBlocks(p.ranks[0]))
	}
	// A prefill that does not finish by length or stop (its client cancels it after the first
	// token) hands nothing over and frees its blocks at once.
	flags = `{"do_remote_decode":true}`
	ctx, cancel := context.WithCancel(testCtx(t))
	st, err := c.Generate(ctx, vllmPD(seqTokens(1, 101), 1000, true, &flags))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	testutil.WaitFor(t, "the cancelled prefill to free its blocks", func() bool { return usedBlocks(p.ranks[0]) == 0 })
}

// sglangPD is an SGLang Generate of prompt in room (host:port its bootstrap server).
func sglangPD(prompt []uint32, maxTokens uint32, stream bool, host string, port int, room int32) *sglang.GenerateRequest {
	return &sglang.GenerateRequest{RequestId: "pd-s", Stream: stream, Tokenized: &sglang.TokenizedInput{InputIds: prompt},
		SamplingParams:      &sglang.SamplingParams{MaxNewTokens: u32p(maxTokens)},
		DisaggregatedParams: &sglang.DisaggregatedParams{BootstrapHost: host, BootstrapPort: int32(port), BootstrapRoom: room}}
}

// sglangRun runs one SGLang Generate and returns its streamed tokens, its complete and its
// error.
func sglangRun(ctx context.Context, c sglang.SglangSchedulerClient, req *sglang.GenerateRequest) ([]uint32, *sglang.GenerateComplete, error) {
	st, err := c.Generate(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	var toks []uint32
	var done *sglang.GenerateComplete
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return toks, done, nil
		}
		if err != nil {
			return toks, done, err
		}
		if ch := r.GetChunk(); ch != nil {
			toks = append(toks, ch.TokenIds...)
		} else {
			done = r.GetComplete()
		}
	}
}

func TestGRPCPDSGLangPair(t *testing.T) {
	p, d, agg := pdTrio(t, PDTransferSGLang, 0)
	pc := sglang.NewSglangSchedulerClient(p.grpcConn(t, worker.RuntimeSGLang))
	dc := sglang.NewSglangSchedulerClient(d.grpcConn(t, worker.RuntimeSGLang))
	ac := sglang.NewSglangSchedulerClient(agg.grpcConn(t, worker.RuntimeSGLang))
	u, _ := url.Parse(p.boot.URL)
	port, _ := strconv.Atoi(u.Port())
	prompt := seqTokens(1, 101)
	for i, stream := range []bool{false, true} {
		room := int32(1<<30 + i)
		type result struct {
			toks []uint32
			c    *sglang.GenerateComplete
			err  error
		}
		// Both legs at once, the decode leg first: it waits for the prefill of its room.
		dres := make(chan result, 1)
		go func() {
			toks, c, err := sglangRun(testCtx(t), dc, sglangPD(prompt, 8, stream, u.Hostname(), port, room))
			dres <- result{toks, c, err}
		}()
		_, pcm, perr := sglangRun(testCtx(t), pc, sglangPD(prompt, 8, false, u.Hostname(), port, room))
		dr := <-dres
		if perr != nil || dr.err != nil {
			t.Fatalf("stream=%v: prefill %v, decode %v", stream, perr, dr.err)
		}
		if len(pcm.GetOutputIds()) != 1 || pcm.GetFinishReason() != "length" {
			t.Errorf("stream=%v: prefill complete %v, want one token, finish length", stream, pcm)
		}
		wantToks, want, err := sglangRun(testCtx(t), ac, &sglang.GenerateRequest{RequestId: "agg", Stream: stream,
			Tokenized: &sglang.TokenizedInput{InputIds: prompt}, SamplingParams: &sglang.SamplingParams{MaxNewTokens: u32p(8)}})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want.GetOutputIds(), dr.c.GetOutputIds()); !stream && (diff != "" || len(want.GetOutputIds()) != 8) {
			t.Errorf("decode complete differs from the aggregated one (-agg +decode):\n%s", diff)
		}
		if diff := cmp.Diff(wantToks, dr.toks); diff != "" || stream && len(wantToks) != 8 {
			t.Errorf("stream=%v: decode chunks differ from the aggregated ones (-agg +decode):\n%s", stream, diff)
		}
	}
	if n := storedTokens(d.sink); n != 96 {
		t.Errorf("decode server stored %d tokens' blocks, want the prompt's 96 (transferred, then cached)", n)
	}
}

func TestGRPCPDSGLangBounds(t *testing.T) {
	p, d, _ := pdTrio(t, PDTransferSGLang, 50*time.Millisecond)
	pc := sglang.NewSglangSchedulerClient(p.grpcConn(t, worker.RuntimeSGLang))
	dc := sglang.NewSglangSchedulerClient(d.grpcConn(t, worker.RuntimeSGLang))
	u, _ := url.Parse(p.boot.URL)
	port, _ := strconv.Atoi(u.Port())
	prompt := seqTokens(1, 101)
	plain := &sglang.GenerateRequest{Tokenized: &sglang.TokenizedInput{InputIds: prompt}}
	if _, _, err := sglangRun(testCtx(t), pc, plain); status.Code(err) != codes.InvalidArgument {
		t.Errorf("prefill without a room: got %v, want INVALID_ARGUMENT", err)
	}
	if _, _, err := sglangRun(testCtx(t), pc, sglangPD(prompt, 4, false, "", 0, -1)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("negative room: got %v, want INVALID_ARGUMENT", err)
	}
	if _, _, err := sglangRun(testCtx(t), dc, sglangPD(prompt, 4, false, "", 0, 3)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("decode without a bootstrap server: got %v, want INVALID_ARGUMENT", err)
	}
	// A prefill whose decode server never comes, and a decode whose prefill never comes, end
	// within the wait bound, as the request's failure.
	if _, _, err := sglangRun(testCtx(t), pc, sglangPD(prompt, 4, false, u.Hostname(), port, 9)); status.Code(err) != codes.Internal {
		t.Errorf("lonely prefill: got %v, want INTERNAL bootstrap timeout", err)
	}
	if _, _, err := sglangRun(testCtx(t), dc, sglangPD(prompt, 4, false, u.Hostname(), port, 10)); status.Code(err) != codes.Internal {
		t.Errorf("lonely decode: got %v, want INTERNAL KV transfer failed", err)
	}
}
