package engine

import (
	"context"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/worker"
)

// prefillVLLM records each GenerateRequest and answers with one token and a hand-off in
// GenerateComplete field 12.
type prefillVLLM struct {
	vllm.UnimplementedVllmEngineServer
	got     chan *vllm.GenerateRequest
	handoff string
}

func (f *prefillVLLM) Generate(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
	f.got <- r
	c := &vllm.GenerateComplete{OutputIds: []uint32{65}, FinishReason: "length", PromptTokens: 3, CompletionTokens: 1, KvTransferParamsJson: &f.handoff}
	return s.Send(&vllm.GenerateResponse{Response: &vllm.GenerateResponse_Complete{Complete: c}})
}

type byteDecoder struct{}

func (byteDecoder) Add(id uint32) string { return string(rune(id)) }
func (byteDecoder) Flush() string        { return "" }

type byteTokenizer struct{}

func (byteTokenizer) NewDecoder(bool) StreamDecoder { return byteDecoder{} }

// TestGRPCNIXLPrefillLeg checks a vLLM prefill leg's GenerateRequest (wire/pd.md §5: max_tokens
// 1, min_tokens 0, n 1, stops cleared, ignore_eos, not streamed, field 8 verbatim) and that
// GenerateComplete field 12 comes back verbatim.
func TestGRPCNIXLPrefillLeg(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const handoffJSON = `{"do_remote_prefill":true, "remote_block_ids":[[1,2]],"z":null}`
	f := &prefillVLLM{got: make(chan *vllm.GenerateRequest, 1), handoff: handoffJSON}
	s := grpc.NewServer()
	vllm.RegisterVllmEngineServer(s, f)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Stop(); <-done })
	w, err := worker.New(worker.Spec{URL: "grpc://" + ln.Addr().String(), Runtime: worker.RuntimeVLLM})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(w, Config{Tokenizer: byteTokenizer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	req, aerr := openai.ParseCompletion([]byte(`{"prompt":"abc","max_tokens":20,"min_tokens":5,"n":1,"stream":true,"stop":["x"],"stop_token_ids":[7]}`), openai.Limits{})
	if aerr != nil {
		t.Fatal(aerr)
	}
	params := `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp, err := e.Generate(ctx, &Request{Completion: req, Model: "m", Tokens: [][]uint32{{1, 2, 3}},
		PD: &PDLeg{Prefill: true, KVTransferParams: []byte(params)}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for {
		if _, err := resp.Body.Next(); err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			break
		}
	}
	g := <-f.got
	sp := g.GetSamplingParams()
	if g.GetStream() || sp.GetMaxTokens() != 1 || sp.GetMinTokens() != 0 || sp.GetN() != 1 || len(sp.GetStop()) != 0 || len(sp.GetStopTokenIds()) != 0 || !sp.GetIgnoreEos() {
		t.Errorf("prefill leg: got stream %v max_tokens %d min_tokens %d n %d stop %v stop_token_ids %v ignore_eos %v, want false 1 0 1 [] [] true",
			g.GetStream(), sp.GetMaxTokens(), sp.GetMinTokens(), sp.GetN(), sp.GetStop(), sp.GetStopTokenIds(), sp.GetIgnoreEos())
	}
	if got := g.GetKvTransferParamsJson(); got != params {
		t.Errorf("field 8: got %s, want %s", got, params)
	}
	if resp.SSE {
		t.Errorf("prefill answer is an event stream, want one body")
	}
	if resp.KVTransferParams == nil || string(resp.KVTransferParams()) != handoffJSON {
		t.Errorf("hand-off: want %s verbatim", handoffJSON)
	}
}

func TestPDRooms(t *testing.T) {
	b := &Bootstrap{Room: SGLangRoomLimit - 1}
	if got := b.roomOf(0, SGLangRoomLimit); got != SGLangRoomLimit-1 {
		t.Errorf("room of prompt 0: got %d, want %d", got, SGLangRoomLimit-1)
	}
	if got := b.roomOf(1, SGLangRoomLimit); got != 0 {
		t.Errorf("room of prompt 1: got %d, want 0 (wrapped inside the int32 range)", got)
	}
	big := &Bootstrap{Room: 1 << 40}
	if got := big.roomOf(0, SGLangRoomLimit); got >= SGLangRoomLimit {
		t.Errorf("room %d is outside SGLang's int32 range", got)
	}
}

func TestCheckPD(t *testing.T) {
	nixl := &PDLeg{Prefill: true}
	boot := &PDLeg{Bootstrap: &Bootstrap{Host: "h", Port: 8998}}
	tests := []struct {
		rt   worker.Runtime
		leg  *PDLeg
		want bool // refused
	}{
		{worker.RuntimeVLLM, nixl, false},
		{worker.RuntimeVLLM, boot, true},
		{worker.RuntimeSGLang, boot, false},
		{worker.RuntimeTokenSpeed, boot, false},
		{worker.RuntimeSGLang, nixl, true},
		{worker.RuntimeTokenSpeed, &PDLeg{KVTransferParams: []byte(`{}`)}, true},
		{worker.RuntimeSGLang, nil, false},
	}
	for _, tt := range tests {
		if got := checkPD(tt.rt, tt.leg) != nil; got != tt.want {
			t.Errorf("checkPD(%s, %+v) refused %v, want %v", tt.rt, tt.leg, got, tt.want)
		}
	}
}
