package sim

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kvgate/kvgate/api/common"
	"github.com/kvgate/kvgate/api/sglang"
)

// sglangService is /sglang.grpc.scheduler.SglangScheduler: cumulative completion_tokens,
// request_id echoed, aborts as gRPC errors.
type sglangService struct {
	sglang.UnimplementedSglangSchedulerServer
	s *GRPCServer
}

func registerSGLang(r grpc.ServiceRegistrar, s *GRPCServer) {
	sglang.RegisterSglangSchedulerServer(r, &sglangService{s: s})
}

func (t *sglangService) Generate(req *sglang.GenerateRequest, stream grpc.ServerStreamingServer[sglang.GenerateResponse]) error {
	sp := req.GetSamplingParams()
	if sp == nil {
		sp = &sglang.SamplingParams{}
	}
	g := genReq{id: req.GetRequestId(), ids: req.GetTokenized().GetInputIds(), maxTokens: sp.MaxNewTokens, n: int(sp.GetN()),
		stream: req.GetStream(), stopIDs: sp.GetStopTokenIds(), minTokens: int(sp.GetMinNewTokens()), ignoreEOS: sp.GetIgnoreEos()}
	if r := req.GetDataParallelRank(); r > 0 {
		g.rank = &r
	}
	var err error
	if g.pd, err = sglangLeg(req.GetDisaggregatedParams()); err != nil {
		return err
	}
	id := req.GetRequestId()
	return t.s.generate(stream.Context(), g, func(o *genOut) error {
		prompt, cached := uint32(o.info.PromptTokens), uint32(o.info.CachedTokens)
		chunk := func(toks []uint32) error {
			return stream.Send(&sglang.GenerateResponse{RequestId: id, Response: &sglang.GenerateResponse_Chunk{Chunk: &sglang.GenerateStreamChunk{
				TokenIds: toks, PromptTokens: prompt, CompletionTokens: uint32(len(o.all)), CachedTokens: cached, Index: uint32(o.index),
			}}})
		}
		if o.finish == "abort" {
			return status.Error(codes.Internal, "request aborted")
		}
		return sendFrames(o, g.stream, chunk, func(out []uint32) error {
			c := &sglang.GenerateComplete{OutputIds: out, FinishReason: o.finish, PromptTokens: prompt,
				CompletionTokens: uint32(len(o.all)), CachedTokens: cached, Index: uint32(o.index)}
			if tok, ok := matchedStopToken(o, g.stopIDs); ok {
				c.MatchedStop = &sglang.GenerateComplete_MatchedTokenId{MatchedTokenId: tok}
			}
			return stream.Send(&sglang.GenerateResponse{RequestId: id, Response: &sglang.GenerateResponse_Complete{Complete: c}})
		})
	})
}

func (t *sglangService) HealthCheck(context.Context, *sglang.HealthCheckRequest) (*sglang.HealthCheckResponse, error) {
	return &sglang.HealthCheckResponse{Healthy: t.s.healthy(), Message: "ok"}, nil
}

func (t *sglangService) Abort(_ context.Context, req *sglang.AbortRequest) (*sglang.AbortResponse, error) {
	ok := t.s.abort(req.GetRequestId())
	return &sglang.AbortResponse{Success: ok}, nil
}

func (t *sglangService) GetModelInfo(context.Context, *sglang.GetModelInfoRequest) (*sglang.GetModelInfoResponse, error) {
	cfg := t.s.ranks[0].Config()
	return &sglang.GetModelInfoResponse{
		ModelPath: t.s.cfg.Model, IsGeneration: true, TokenizerPath: t.s.cfg.TokenizerPath, ServedModelName: t.s.cfg.Model,
		MaxContextLength: int32(cfg.MaxModelLen), MaxReqInputLen: int32(cfg.MaxModelLen), VocabSize: int32(cfg.VocabSize),
		EosTokenIds: t.s.eosIDs(), BosTokenId: t.s.cfg.BOSTokenID,
	}, nil
}

func (t *sglangService) GetServerInfo(context.Context, *sglang.GetServerInfoRequest) (*sglang.GetServerInfoResponse, error) {
	cfg := t.s.ranks[0].Config()
	return &sglang.GetServerInfoResponse{
		ServerArgs: t.s.serverArgs(), ActiveRequests: int32(t.s.ranks.NumRunning() + t.s.ranks.NumWaiting()),
		UptimeSeconds: timeSince(t.s.start), MaxTotalNumTokens: int32(cfg.NumBlocks * cfg.BlockSize),
		SglangVersion: simVersion, ServerType: "grpc", StartTime: timestamppb.New(t.s.start),
	}, nil
}

func (t *sglangService) GetLoads(_ context.Context, req *sglang.GetLoadsRequest) (*sglang.GetLoadsResponse, error) {
	resp := &sglang.GetLoadsResponse{Timestamp: nowISO(), Version: simVersion, DpRankCount: int32(len(t.s.ranks))}
	for _, l := range t.s.loads(req.DpRank) {
		resp.Loads = append(resp.Loads, &sglang.SchedulerLoad{
			DpRank: int32(l.rank), NumRunningReqs: int32(l.running), NumWaitingReqs: int32(l.waiting),
			NumTotalReqs: int32(l.running + l.waiting), NumUsedTokens: int32(l.usedTokens), MaxTotalNumTokens: int32(l.maxTokens),
			MaxRunningRequests: int32(l.maxRunning), TokenUsage: l.usage,
		})
	}
	return resp, nil
}

func (t *sglangService) FlushCache(context.Context, *common.FlushCacheRequest) (*common.FlushCacheResponse, error) {
	ok, msg := t.s.flush()
	return &common.FlushCacheResponse{Success: ok, Message: msg}, nil
}

func (t *sglangService) SubscribeKvEvents(req *common.SubscribeKvEventsRequest, stream grpc.ServerStreamingServer[common.KvEventBatch]) error {
	return t.s.subscribeKvEvents(req, stream)
}
