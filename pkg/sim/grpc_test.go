package sim

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/common"
	"github.com/kvgate/kvgate/api/sglang"
	"github.com/kvgate/kvgate/api/tokenspeed"
	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/worker"
)

// grpcEnv runs dp engine ranks behind a gRPC server of one runtime on loopback.
type grpcEnv struct {
	ranks  Ranks
	conn   *grpc.ClientConn
	bridge *kvbridge.BridgeServer
}

func newGRPCEnv(t *testing.T, runtime worker.Runtime, dp int, kvEvents bool) *grpcEnv {
	t.Helper()
	env := &grpcEnv{}
	var sink EventSink
	if kvEvents {
		b, err := kvbridge.NewBridgeServer(kvbridge.BridgeConfig{Runtime: runtime, History: 100}, nil)
		if err != nil {
			t.Fatal(err)
		}
		env.bridge, sink = b, ConsumerSink{C: b}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for r := range dp {
		e, err := NewEngine(EngineConfig{Core: Config{VocabSize: 1000, EOSTokenIDs: []uint32{2}}, Rank: r, TimeScale: 1e-3}, SystemClock{}, sink, nil)
		if err != nil {
			t.Fatal(err)
		}
		env.ranks = append(env.ranks, e)
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(ctx) }()
	}
	gs, err := NewGRPCServer(GRPCConfig{Runtime: runtime, Model: "sim-model", TokenizerPath: "/tok.json"}, env.ranks, env.bridge)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(kvbridge.BridgeServerOptions()...)
	gs.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(lis) }()
	env.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		env.conn.Close()
		if env.bridge != nil {
			env.bridge.Close()
		}
		srv.Stop()
		cancel()
		wg.Wait()
	})
	return env
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

func u32p(v uint32) *uint32 { return &v }

// vllmCollect runs one vLLM Generate and returns the per-index token streams and completes.
func vllmCollect(t *testing.T, c vllm.VllmEngineClient, req *vllm.GenerateRequest) (map[uint32][]uint32, map[uint32]*vllm.GenerateComplete) {
	t.Helper()
	st, err := c.Generate(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	chunks, completes := map[uint32][]uint32{}, map[uint32]*vllm.GenerateComplete{}
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return chunks, completes
		}
		if err != nil {
			t.Fatal(err)
		}
		if ch := r.GetChunk(); ch != nil {
			if ch.CompletionTokens != uint32(len(ch.TokenIds)) {
				t.Errorf("vLLM chunk completion_tokens %d for %d tokens: want the delta count", ch.CompletionTokens, len(ch.TokenIds))
			}
			if completes[ch.Index] != nil {
				t.Errorf("chunk after complete for index %d", ch.Index)
			}
			chunks[ch.Index] = append(chunks[ch.Index], ch.TokenIds...)
		} else {
			completes[r.GetComplete().Index] = r.GetComplete()
		}
	}
}

func TestGRPCVLLMGenerate(t *testing.T) {
	env := newGRPCEnv(t, worker.RuntimeVLLM, 1, true)
	c := vllm.NewVllmEngineClient(env.conn)
	prompt := seqTokens(10, 40)
	mk := func(stream bool, n uint32) *vllm.GenerateRequest {
		return &vllm.GenerateRequest{RequestId: "r1", Stream: stream,
			Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: prompt}},
			SamplingParams: &vllm.SamplingParams{MaxTokens: u32p(9), N: n}}
	}
	_, plain := vllmCollect(t, c, mk(false, 1))
	full := plain[0]
	if full == nil || len(full.OutputIds) != 9 || full.CompletionTokens != 9 || full.FinishReason != "length" || full.PromptTokens != 40 {
		t.Fatalf("non-streaming complete: %v", full)
	}
	chunks, completes := vllmCollect(t, c, mk(true, 2))
	for idx := range uint32(2) {
		cm := completes[idx]
		if cm == nil {
			t.Fatalf("no complete for index %d", idx)
		}
		if len(chunks[idx]) != 9 {
			t.Errorf("index %d: %d streamed tokens, want 9", idx, len(chunks[idx]))
		}
		got := chunks[idx]
		if diff := cmp.Diff(got[len(got)-len(cm.OutputIds):], cm.OutputIds); diff != "" || len(cm.OutputIds) == 0 {
			t.Errorf("streaming complete must repeat the last delta (-chunk tail +complete):\n%s", diff)
		}
		if cm.CachedTokens != 32 {
			t.Errorf("cached_tokens: got %d, want 32 (second request, same prompt)", cm.CachedTokens)
		}
	}
	if diff := cmp.Diff(full.OutputIds, chunks[0]); diff != "" {
		t.Errorf("sample 0 differs between streaming and not (same seed derivation):\n%s", diff)
	}

	st, _ := c.Generate(testCtx(t), &vllm.GenerateRequest{})
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty input: got %v, want InvalidArgument", err)
	}

	h, err := c.HealthCheck(testCtx(t), &vllm.HealthCheckRequest{})
	if err != nil || !h.Healthy {
		t.Errorf("HealthCheck: %v %v", h, err)
	}
	mi, err := c.GetModelInfo(testCtx(t), &vllm.GetModelInfoRequest{})
	if err != nil || mi.ServedModelName != "sim-model" || mi.VocabSize != 1000 || mi.MaxContextLength != 32768 ||
		!cmp.Equal(mi.EosTokenIds, []int32{2}) || mi.TokenizerPath != "/tok.json" {
		t.Errorf("GetModelInfo: %v %v", mi, err)
	}
	loads, err := c.GetLoads(testCtx(t), &vllm.GetLoadsRequest{})
	if err != nil || len(loads.Loads) != 1 || loads.DpRankCount != 1 {
		t.Errorf("GetLoads: %v %v", loads, err)
	}
}

func TestGRPCCumulativeRuntimes(t *testing.T) {
	prompt := seqTokens(10, 40)
	t.Run("tokenspeed", func(t *testing.T) {
		env := newGRPCEnv(t, worker.RuntimeTokenSpeed, 1, true)
		c := tokenspeed.NewTokenSpeedSchedulerClient(env.conn)
		st, err := c.Generate(testCtx(t), &tokenspeed.GenerateRequest{RequestId: "ts", Stream: true,
			Tokenized: &tokenspeed.TokenizedInput{InputIds: prompt}, SamplingParams: &tokenspeed.SamplingParams{MaxNewTokens: u32p(7)}})
		if err != nil {
			t.Fatal(err)
		}
		var streamed []uint32
		var complete *tokenspeed.GenerateComplete
		for {
			r, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.RequestId != "ts" {
				t.Errorf("request_id: got %q", r.RequestId)
			}
			if ch := r.GetChunk(); ch != nil {
				streamed = append(streamed, ch.TokenIds...)
				if ch.CompletionTokens != uint32(len(streamed)) {
					t.Errorf("completion_tokens %d after %d tokens: want cumulative", ch.CompletionTokens, len(streamed))
				}
			} else {
				complete = r.GetComplete()
			}
		}
		if complete == nil || complete.CompletionTokens != 7 || len(streamed) != 7 || complete.FinishReason != "length" {
			t.Errorf("complete %v after %d streamed tokens", complete, len(streamed))
		}
		fl, err := c.FlushCache(testCtx(t), &common.FlushCacheRequest{})
		if err != nil || !fl.Success {
			t.Errorf("FlushCache: %v %v", fl, err)
		}
	})
	t.Run("sglang", func(t *testing.T) {
		env := newGRPCEnv(t, worker.RuntimeSGLang, 2, false)
		c := sglang.NewSglangSchedulerClient(env.conn)
		st, err := c.Generate(testCtx(t), &sglang.GenerateRequest{RequestId: "sg",
			Tokenized: &sglang.TokenizedInput{InputIds: prompt}, SamplingParams: &sglang.SamplingParams{MaxNewTokens: u32p(5)}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if cm := r.GetComplete(); cm == nil || len(cm.OutputIds) != 5 || cm.CompletionTokens != 5 {
			t.Errorf("non-streaming complete: %v", r)
		}
		// No KV events configured: SubscribeKvEvents is UNIMPLEMENTED.
		sub, err := c.SubscribeKvEvents(testCtx(t), &common.SubscribeKvEventsRequest{})
		if err == nil {
			_, err = sub.Recv()
		}
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("SubscribeKvEvents without events: got %v, want Unimplemented", err)
		}
		loads, err := c.GetLoads(testCtx(t), &sglang.GetLoadsRequest{})
		if err != nil || len(loads.Loads) != 2 {
			t.Errorf("GetLoads with dp 2: %v %v", loads, err)
		}
	})
}

func TestGRPCSubscribeKvEvents(t *testing.T) {
	env := newGRPCEnv(t, worker.RuntimeVLLM, 1, true)
	c := vllm.NewVllmEngineClient(env.conn)
	gen := func(base uint32) {
		vllmCollect(t, c, &vllm.GenerateRequest{
			Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: seqTokens(base, 40)}},
			SamplingParams: &vllm.SamplingParams{MaxTokens: u32p(2)}})
	}
	gen(100)
	gen(500)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	sub, err := c.SubscribeKvEvents(ctx, &common.SubscribeKvEventsRequest{StartSequenceNumber: 0})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	var stored []uint32
	for len(seqs) < 2 {
		b, err := sub.Recv()
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, b.SequenceNumber)
		if b.DpRank == nil || *b.DpRank != 0 {
			t.Errorf("dp_rank: %v", b.DpRank)
		}
		for _, ev := range b.Events {
			for _, blk := range ev.GetStored().GetBlocks() {
				stored = append(stored, blk.TokenIds[0])
				if blk.BlockSize != 16 {
					t.Errorf("block_size %d", blk.BlockSize)
				}
			}
		}
	}
	if diff := cmp.Diff([]uint64{1, 2}, seqs); diff != "" {
		t.Errorf("history from cursor 0 must be numbered from 1 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint32{100, 116, 500, 516}, stored); diff != "" {
		t.Errorf("stored blocks' first tokens (-want +got):\n%s", diff)
	}
	// A cursor inside the history resumes after it; live batches follow.
	ctx2, cancel2 := context.WithCancel(testCtx(t))
	defer cancel2()
	sub2, err := c.SubscribeKvEvents(ctx2, &common.SubscribeKvEventsRequest{StartSequenceNumber: 1})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := sub2.Recv(); err != nil || b.SequenceNumber != 2 {
		t.Fatalf("resume from cursor 1: got %v %v, want seq 2", b, err)
	}
	gen(900)
	if b, err := sub2.Recv(); err != nil || b.SequenceNumber != 3 {
		t.Fatalf("live after resume: got %v %v, want seq 3", b, err)
	}
	// A cursor beyond the history is OUT_OF_RANGE.
	sub3, err := c.SubscribeKvEvents(testCtx(t), &common.SubscribeKvEventsRequest{StartSequenceNumber: 99})
	if err == nil {
		_, err = sub3.Recv()
	}
	if status.Code(err) != codes.OutOfRange {
		t.Errorf("cursor 99: got %v, want OutOfRange", err)
	}
}

// TestGRPCMinTokens: min_tokens reaches the engine (stop ids masked until then); ignore_eos is
// accepted.
func TestGRPCMinTokens(t *testing.T) {
	env := newGRPCEnv(t, worker.RuntimeVLLM, 1, false)
	c := vllm.NewVllmEngineClient(env.conn)
	var stops []uint32
	for id := uint32(3); id < 1000; id++ {
		stops = append(stops, id)
	}
	for _, minTokens := range []uint32{0, 5} {
		_, completes := vllmCollect(t, c, &vllm.GenerateRequest{RequestId: "m",
			Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: seqTokens(10, 20)}},
			SamplingParams: &vllm.SamplingParams{MaxTokens: u32p(50), MinTokens: minTokens, StopTokenIds: stops, IgnoreEos: true}})
		out := completes[0].GetOutputIds()
		if completes[0].GetFinishReason() != "stop" || len(out) <= int(minTokens) || slices.ContainsFunc(out[:minTokens], func(id uint32) bool { return id >= 3 }) {
			t.Errorf("min_tokens %d: output %v, finish %q; want the first stop id after %d tokens", minTokens, out, completes[0].GetFinishReason(), minTokens)
		}
	}
}
