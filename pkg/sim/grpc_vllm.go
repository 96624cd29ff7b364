package sim

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/common"
	"github.com/kvgate/kvgate/api/vllm"
)

// vllmService is /vllm.grpc.engine.VllmEngine: delta chunks (completion_tokens per chunk),
// and in streaming mode a complete that repeats only the last delta (wire/smg-grpc.md §7.2).
type vllmService struct {
	vllm.UnimplementedVllmEngineServer
	s *GRPCServer
}

func registerVLLM(r grpc.ServiceRegistrar, s *GRPCServer) {
	vllm.RegisterVllmEngineServer(r, &vllmService{s: s})
}

func (v *vllmService) Generate(req *vllm.GenerateRequest, stream grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
	ids := req.GetTokenized().GetInputIds()
	if text, ok := req.GetInput().(*vllm.GenerateRequest_Text); ok {
		if v.s.cfg.Codec == nil {
			return status.Error(codes.InvalidArgument, "text input needs a tokenizer; send tokenized input")
		}
		var err error
		if ids, err = v.s.cfg.Codec.Encode(text.Text); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
	}
	sp := req.GetSamplingParams()
	if sp == nil {
		sp = &vllm.SamplingParams{}
	}
	g := genReq{id: req.GetRequestId(), ids: ids, maxTokens: sp.MaxTokens, n: int(sp.GetN()), stream: req.GetStream(),
		stopIDs: sp.GetStopTokenIds(), minTokens: int(sp.GetMinTokens()), ignoreEOS: sp.GetIgnoreEos(), rank: req.DataParallelRank}
	if sp.Seed != nil {
		seed := int64(*sp.Seed)
		g.seed = &seed
	}
	var err error
	if g.pd, err = vllmLeg(req.KvTransferParamsJson); err != nil {
		return err
	}
	return v.s.generate(stream.Context(), g, func(o *genOut) error {
		prompt, cached := uint32(o.info.PromptTokens), uint32(o.info.CachedTokens)
		chunk := func(toks []uint32) error {
			return stream.Send(&vllm.GenerateResponse{Response: &vllm.GenerateResponse_Chunk{Chunk: &vllm.GenerateStreamChunk{
				TokenIds: toks, PromptTokens: prompt, CompletionTokens: uint32(len(toks)), CachedTokens: cached, Index: uint32(o.index),
			}}})
		}
		return sendFrames(o, g.stream, chunk, func(out []uint32) error {
			c := &vllm.GenerateComplete{OutputIds: out, FinishReason: o.finish, PromptTokens: prompt,
				CompletionTokens: uint32(len(out)), CachedTokens: cached, Index: uint32(o.index)}
			if tok, ok := matchedStopToken(o, g.stopIDs); ok {
				c.MatchedStop = &vllm.GenerateComplete_MatchedTokenId{MatchedTokenId: tok}
			}
			if o.kv != nil {
				kv := string(o.kv)
				c.KvTransferParamsJson = &kv
			}
			return stream.Send(&vllm.GenerateResponse{Response: &vllm.GenerateResponse_Complete{Complete: c}})
		})
	})
}

func (v *vllmService) HealthCheck(context.Context, *vllm.HealthCheckRequest) (*vllm.HealthCheckResponse, error) {
	if !v.s.healthy() {
		return &vllm.HealthCheckResponse{Healthy: false, Message: "engine stopped"}, nil
	}
	return &vllm.HealthCheckResponse{Healthy: true, Message: "ok"}, nil
}

func (v *vllmService) Abort(_ context.Context, req *vllm.AbortRequest) (*vllm.AbortResponse, error) {
	for _, id := range req.GetRequestIds() {
		v.s.abort(id)
	}
	return &vllm.AbortResponse{}, nil
}

func (v *vllmService) GetModelInfo(context.Context, *vllm.GetModelInfoRequest) (*vllm.GetModelInfoResponse, error) {
	cfg := v.s.ranks[0].Config()
	return &vllm.GetModelInfoResponse{
		ModelPath: v.s.cfg.Model, IsGeneration: true, MaxContextLength: uint32(cfg.MaxModelLen), VocabSize: uint32(cfg.VocabSize),
		ServedModelName: v.s.cfg.Model, TokenizerPath: v.s.cfg.TokenizerPath, EosTokenIds: v.s.eosIDs(),
		BosTokenId: v.s.cfg.BOSTokenID, MaxReqInputLen: int32(cfg.MaxModelLen),
	}, nil
}

func (v *vllmService) GetServerInfo(context.Context, *vllm.GetServerInfoRequest) (*vllm.GetServerInfoResponse, error) {
	return &vllm.GetServerInfoResponse{
		ActiveRequests: uint32(v.s.ranks.NumRunning() + v.s.ranks.NumWaiting()), UptimeSeconds: timeSince(v.s.start),
		ServerType: "vllm-grpc", DataParallelSize: int32(len(v.s.ranks)),
	}, nil
}

func (v *vllmService) GetLoads(_ context.Context, req *vllm.GetLoadsRequest) (*vllm.GetLoadsResponse, error) {
	resp := &vllm.GetLoadsResponse{Timestamp: nowISO(), Version: simVersion, DpRankCount: int32(len(v.s.ranks))}
	for _, l := range v.s.loads(req.DpRank) {
		resp.Loads = append(resp.Loads, &vllm.SchedulerLoad{
			DpRank: int32(l.rank), NumRunningReqs: int32(l.running), NumWaitingReqs: int32(l.waiting),
			NumTotalReqs: int32(l.running + l.waiting), NumUsedTokens: int32(l.usedTokens), MaxTotalNumTokens: int32(l.maxTokens),
			TokenUsage: l.usage, MaxRunningRequests: int32(l.maxRunning),
		})
	}
	return resp, nil
}

func (v *vllmService) SubscribeKvEvents(req *common.SubscribeKvEventsRequest, stream grpc.ServerStreamingServer[common.KvEventBatch]) error {
	return v.s.subscribeKvEvents(req, stream)
}
