package engine

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/sglang"
	"github.com/kvgate/kvgate/api/tokenspeed"
	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/worker"
)

// genRequest is an engine-neutral Generate request for one prompt (wire/smg-grpc.md §7.1).
type genRequest struct {
	id           string
	tokens       []uint32
	stream       bool
	maxTokens    int // 0: not given (the engine's default: what the context leaves)
	minTokens    int
	temperature  *float64
	topP         *float64
	n            int
	stop         []string
	stopTokenIDs []uint32
	seed         *int64
	ignoreEOS    bool
	// skipSpecial is the engine's detokenization setting, which its stop-string matching
	// uses; the gateway decodes with the same setting.
	skipSpecial bool
	// pd is the call's prefill/decode leg (nil: none), prompt the prompt's index in its
	// request (for its bootstrap room).
	pd     *PDLeg
	prompt int
}

// genMsg is one engine-neutral Generate response message: a chunk or a complete.
type genMsg struct {
	complete         bool
	index            int
	tokens           []uint32 // chunk: new tokens; complete: output_ids
	promptTokens     int
	completionTokens int
	cachedTokens     int
	finishReason     string
	// kvParams is a vLLM complete's kv_transfer_params_json (field 12; "" when absent).
	kvParams string
}

// genStream yields the messages of one Generate call; Recv returns io.EOF at the clean end.
type genStream interface {
	Recv() (genMsg, error)
}

// runtimeClient is one engine service's client behind the engine-neutral calls.
type runtimeClient interface {
	generate(ctx context.Context, r *genRequest) (genStream, error)
	abort(ctx context.Context, id string) error
	health(ctx context.Context) (healthy bool, msg string, err error)
	modelName(ctx context.Context) (string, error)
	// loads returns running+waiting requests summed over DP ranks (GetLoads).
	loads(ctx context.Context) (Load, error)
}

// runtimeClients is the one table of per-runtime engine calls: each runtime's client on a
// connection.
var runtimeClients = map[worker.Runtime]func(grpc.ClientConnInterface) runtimeClient{
	worker.RuntimeVLLM: func(c grpc.ClientConnInterface) runtimeClient { return &vllmClient{c: vllm.NewVllmEngineClient(c)} },
	worker.RuntimeSGLang: func(c grpc.ClientConnInterface) runtimeClient {
		return &sglangClient{c: sglang.NewSglangSchedulerClient(c)}
	},
	worker.RuntimeTokenSpeed: func(c grpc.ClientConnInterface) runtimeClient {
		return &tokenspeedClient{c: tokenspeed.NewTokenSpeedSchedulerClient(c)}
	},
}

// ---- vLLM (vllm.grpc.engine.VllmEngine) ----

type vllmClient struct{ c vllm.VllmEngineClient }

func (v *vllmClient) generate(ctx context.Context, r *genRequest) (genStream, error) {
	sp := &vllm.SamplingParams{
		TopP:                       1,
		RepetitionPenalty:          1,
		Stop:                       r.stop,
		StopTokenIds:               r.stopTokenIDs,
		SkipSpecialTokens:          r.skipSpecial,
		SpacesBetweenSpecialTokens: true,
		IgnoreEos:                  r.ignoreEOS,
		N:                          uint32(r.n),
	}
	t := float32(1)
	if r.temperature != nil {
		t = float32(*r.temperature)
	}
	sp.Temperature = &t
	if r.topP != nil {
		sp.TopP = float32(*r.topP)
	}
	if r.maxTokens > 0 {
		mt := uint32(r.maxTokens)
		sp.MaxTokens = &mt
	}
	sp.MinTokens = uint32(r.minTokens)
	if r.seed != nil {
		// SMG clamps an i64 seed into int32 (wire/smg-grpc.md §7.1).
		s := int32(min(max(*r.seed, -1<<31), 1<<31-1))
		sp.Seed = &s
	}
	req := &vllm.GenerateRequest{
		RequestId:      r.id,
		Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: r.tokens}},
		SamplingParams: sp,
		Stream:         r.stream,
	}
	if r.pd != nil && r.pd.KVTransferParams != nil {
		kv := string(r.pd.KVTransferParams)
		req.KvTransferParamsJson = &kv
	}
	if r.pd != nil {
		req.DataParallelRank = r.pd.DataParallelRank
	}
	st, err := v.c.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	return newEngineStream(st.Recv), nil
}

func (v *vllmClient) abort(ctx context.Context, id string) error {
	_, err := v.c.Abort(ctx, &vllm.AbortRequest{RequestIds: []string{id}})
	return err
}

func (v *vllmClient) health(ctx context.Context) (bool, string, error) {
	r, err := v.c.HealthCheck(ctx, &vllm.HealthCheckRequest{})
	if err != nil {
		return false, "", err
	}
	return r.Healthy, r.Message, nil
}

func (v *vllmClient) loads(ctx context.Context) (Load, error) {
	r, err := v.c.GetLoads(ctx, &vllm.GetLoadsRequest{Include: []string{"core"}})
	if err != nil {
		return Load{}, err
	}
	return sumLoads(r.Loads), nil
}

func (v *vllmClient) modelName(ctx context.Context) (string, error) {
	r, err := v.c.GetModelInfo(ctx, &vllm.GetModelInfoRequest{})
	if err != nil {
		return "", err
	}
	return firstNonEmpty(r.ServedModelName, r.ModelPath), nil
}

// ---- SGLang (sglang.grpc.scheduler.SglangScheduler) ----

type sglangClient struct{ c sglang.SglangSchedulerClient }

func (v *sglangClient) generate(ctx context.Context, r *genRequest) (genStream, error) {
	// SGLang's scalars are not optional: proto zeros are not engine defaults, so every value
	// is sent explicitly (wire/smg-grpc.md §5.2).
	sp := &sglang.SamplingParams{
		Temperature:                1,
		TopP:                       1,
		TopK:                       -1,
		RepetitionPenalty:          1,
		Stop:                       r.stop,
		StopTokenIds:               r.stopTokenIDs,
		SkipSpecialTokens:          r.skipSpecial,
		SpacesBetweenSpecialTokens: true,
		N:                          uint32(r.n),
		IgnoreEos:                  r.ignoreEOS,
	}
	if r.temperature != nil {
		sp.Temperature = float32(*r.temperature)
	}
	if r.topP != nil {
		sp.TopP = float32(*r.topP)
	}
	if r.maxTokens > 0 {
		mt := uint32(r.maxTokens)
		sp.MaxNewTokens = &mt
	}
	req := &sglang.GenerateRequest{
		RequestId:      r.id,
		Tokenized:      &sglang.TokenizedInput{InputIds: r.tokens},
		SamplingParams: sp,
		Stream:         r.stream,
	}
	if b := r.pd.bootstrap(); b != nil {
		req.DisaggregatedParams = &sglang.DisaggregatedParams{BootstrapHost: b.Host, BootstrapPort: int32(b.Port),
			BootstrapRoom: int32(b.roomOf(r.prompt, SGLangRoomLimit))}
	}
	st, err := v.c.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	return newEngineStream(st.Recv), nil
}

func (v *sglangClient) abort(ctx context.Context, id string) error {
	_, err := v.c.Abort(ctx, &sglang.AbortRequest{RequestId: id, Reason: "Stream dropped"})
	return err
}

func (v *sglangClient) health(ctx context.Context) (bool, string, error) {
	r, err := v.c.HealthCheck(ctx, &sglang.HealthCheckRequest{})
	if err != nil {
		return false, "", err
	}
	return r.Healthy, r.Message, nil
}

func (v *sglangClient) loads(ctx context.Context) (Load, error) {
	r, err := v.c.GetLoads(ctx, &sglang.GetLoadsRequest{Include: []string{"core"}})
	if err != nil {
		return Load{}, err
	}
	return sumLoads(r.Loads), nil
}

func (v *sglangClient) modelName(ctx context.Context) (string, error) {
	r, err := v.c.GetModelInfo(ctx, &sglang.GetModelInfoRequest{})
	if err != nil {
		return "", err
	}
	return firstNonEmpty(r.ServedModelName, r.ModelPath), nil
}

// ---- TokenSpeed (tokenspeed.grpc.scheduler.TokenSpeedScheduler) ----

type tokenspeedClient struct {
	c tokenspeed.TokenSpeedSchedulerClient
}

func (v *tokenspeedClient) generate(ctx context.Context, r *genRequest) (genStream, error) {
	t, tp, rp := float32(1), float32(1), float32(1)
	topK := int32(-1)
	var zero float32
	if r.temperature != nil {
		t = float32(*r.temperature)
	}
	if r.topP != nil {
		tp = float32(*r.topP)
	}
	sp := &tokenspeed.SamplingParams{
		Temperature:                &t,
		TopP:                       &tp,
		TopK:                       &topK,
		FrequencyPenalty:           &zero,
		PresencePenalty:            &zero,
		RepetitionPenalty:          &rp,
		Stop:                       r.stop,
		StopTokenIds:               r.stopTokenIDs,
		IgnoreEos:                  r.ignoreEOS,
		SkipSpecialTokens:          r.skipSpecial,
		SpacesBetweenSpecialTokens: true,
		N:                          uint32(r.n),
	}
	if r.maxTokens > 0 {
		mt := uint32(r.maxTokens)
		sp.MaxNewTokens = &mt
	}
	if r.seed != nil {
		if *r.seed < 0 {
			return nil, status.Error(codes.InvalidArgument, "seed must be non-negative for TokenSpeed workers")
		}
		s := uint64(*r.seed)
		sp.SamplingSeed = &s
	}
	req := &tokenspeed.GenerateRequest{
		RequestId:      r.id,
		Tokenized:      &tokenspeed.TokenizedInput{InputIds: r.tokens},
		SamplingParams: sp,
		Stream:         r.stream,
	}
	if b := r.pd.bootstrap(); b != nil {
		req.KvBootstrapInfo = &tokenspeed.KvBootstrapInfo{BootstrapHost: b.Host, BootstrapPort: int32(b.Port),
			BootstrapRoom: int64(b.roomOf(r.prompt, TokenSpeedRoomLimit))}
	}
	st, err := v.c.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	return newEngineStream(st.Recv), nil
}

func (v *tokenspeedClient) abort(ctx context.Context, id string) error {
	_, err := v.c.Abort(ctx, &tokenspeed.AbortRequest{RequestId: id, Reason: "Stream dropped"})
	return err
}

func (v *tokenspeedClient) health(ctx context.Context) (bool, string, error) {
	r, err := v.c.HealthCheck(ctx, &tokenspeed.HealthCheckRequest{})
	if err != nil {
		return false, "", err
	}
	return r.Healthy, r.Message, nil
}

func (v *tokenspeedClient) loads(ctx context.Context) (Load, error) {
	r, err := v.c.GetLoads(ctx, &tokenspeed.GetLoadsRequest{Include: []string{"core"}})
	if err != nil {
		return Load{}, err
	}
	return sumLoads(r.Loads), nil
}

func (v *tokenspeedClient) modelName(ctx context.Context) (string, error) {
	r, err := v.c.GetModelInfo(ctx, &tokenspeed.GetModelInfoRequest{})
	if err != nil {
		return "", err
	}
	return firstNonEmpty(r.ServedModelName, r.ModelPath), nil
}

// engineChunk and engineComplete are the getters the three engines' generated
// GenerateStreamChunk and GenerateComplete messages have in common (same names and types in
// vllm, sglang and tokenspeed); comparable so a nil (absent) message can be recognised.
type engineChunk interface {
	comparable
	GetIndex() uint32
	GetTokenIds() []uint32
	GetPromptTokens() uint32
	GetCompletionTokens() uint32
	GetCachedTokens() uint32
}

type engineComplete interface {
	comparable
	GetIndex() uint32
	GetOutputIds() []uint32
	GetPromptTokens() uint32
	GetCompletionTokens() uint32
	GetCachedTokens() uint32
	GetFinishReason() string
}

// engineResponse is a generated GenerateResponse: a oneof of a chunk and a complete.
type engineResponse[C engineChunk, D engineComplete] interface {
	GetChunk() C
	GetComplete() D
}

// engineStream adapts one engine's Generate stream (its Recv method) to genStream. The three
// engines' responses differ only in Go type, so one conversion serves all of them.
type engineStream[M engineResponse[C, D], C engineChunk, D engineComplete] struct {
	recv func() (M, error)
}

// newEngineStream returns the genStream reading recv; the type arguments are inferred from it.
func newEngineStream[M engineResponse[C, D], C engineChunk, D engineComplete](recv func() (M, error)) genStream {
	return engineStream[M, C, D]{recv: recv}
}

func (s engineStream[M, C, D]) Recv() (genMsg, error) {
	var noChunk C
	var noComplete D
	for {
		m, err := s.recv()
		if err != nil {
			return genMsg{}, err
		}
		if c := m.GetChunk(); c != noChunk {
			return genMsg{index: int(c.GetIndex()), tokens: c.GetTokenIds(), promptTokens: int(c.GetPromptTokens()), completionTokens: int(c.GetCompletionTokens()), cachedTokens: int(c.GetCachedTokens())}, nil
		}
		if c := m.GetComplete(); c != noComplete {
			out := genMsg{complete: true, index: int(c.GetIndex()), tokens: c.GetOutputIds(), promptTokens: int(c.GetPromptTokens()), completionTokens: int(c.GetCompletionTokens()), cachedTokens: int(c.GetCachedTokens()), finishReason: c.GetFinishReason()}
			if kv, ok := any(c).(interface{ GetKvTransferParamsJson() string }); ok { // vLLM only
				out.kvParams = kv.GetKvTransferParamsJson()
			}
			return out, nil
		}
		// An empty message carries nothing: skip it.
	}
}

// sumLoads is the running and waiting requests over an engine's GetLoads entries.
func sumLoads[L interface {
	GetNumRunningReqs() int32
	GetNumWaitingReqs() int32
}](loads []L) Load {
	var n Load
	for _, l := range loads {
		n.Running += max(int64(l.GetNumRunningReqs()), 0)
		n.Waiting += max(int64(l.GetNumWaitingReqs()), 0)
	}
	return n
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

var (
	_ runtimeClient = (*vllmClient)(nil)
	_ runtimeClient = (*sglangClient)(nil)
	_ runtimeClient = (*tokenspeedClient)(nil)
)
