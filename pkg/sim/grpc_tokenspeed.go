package sim

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kvgate/kvgate/api/common"
	"github.com/kvgate/kvgate/api/tokenspeed"
)

const simVersion = "kvgate-sim"

func timeSince(t time.Time) float64 { return time.Since(t).Seconds() }

func nowISO() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// serverArgs is the server_args Struct of SGLang/TokenSpeed GetServerInfo.
func (s *GRPCServer) serverArgs() *structpb.Struct {
	cfg := s.ranks[0].Config()
	st, _ := structpb.NewStruct(map[string]any{
		"model": s.cfg.Model, "served_model_name": s.cfg.Model, "tokenizer": s.cfg.TokenizerPath,
		"tp_size": 2, "dp_size": len(s.ranks), "pp_size": 1, "context_length": cfg.MaxModelLen,
		"max_total_tokens": cfg.NumBlocks * cfg.BlockSize, "max_running_requests": cfg.MaxRunning,
		"page_size": cfg.BlockSize, "is_embedding": false, "vocab_size": cfg.VocabSize,
	})
	return st
}

// tokenspeedService is /tokenspeed.grpc.scheduler.TokenSpeedScheduler: cumulative
// completion_tokens, request_id echoed, aborts as gRPC errors.
type tokenspeedService struct {
	tokenspeed.UnimplementedTokenSpeedSchedulerServer
	s *GRPCServer
}

func registerTokenSpeed(r grpc.ServiceRegistrar, s *GRPCServer) {
	tokenspeed.RegisterTokenSpeedSchedulerServer(r, &tokenspeedService{s: s})
}

func (t *tokenspeedService) Generate(req *tokenspeed.GenerateRequest, stream grpc.ServerStreamingServer[tokenspeed.GenerateResponse]) error {
	sp := req.GetSamplingParams()
	if sp == nil {
		sp = &tokenspeed.SamplingParams{}
	}
	g := genReq{id: req.GetRequestId(), ids: req.GetTokenized().GetInputIds(), maxTokens: sp.MaxNewTokens, n: int(sp.GetN()),
		stream: req.GetStream(), stopIDs: sp.GetStopTokenIds(), minTokens: int(sp.GetMinNewTokens()), ignoreEOS: sp.GetIgnoreEos()}
	if sp.SamplingSeed != nil {
		seed := int64(*sp.SamplingSeed)
		g.seed = &seed
	}
	var err error
	if g.pd, err = tokenspeedLeg(req.GetKvBootstrapInfo()); err != nil {
		return err
	}
	id := req.GetRequestId()
	return t.s.generate(stream.Context(), g, func(o *genOut) error {
		prompt, cached := uint32(o.info.PromptTokens), uint32(o.info.CachedTokens)
		chunk := func(toks []uint32) error {
			return stream.Send(&tokenspeed.GenerateResponse{RequestId: id, Response: &tokenspeed.GenerateResponse_Chunk{Chunk: &tokenspeed.GenerateStreamChunk{
				TokenIds: toks, PromptTokens: prompt, CompletionTokens: uint32(len(o.all)), CachedTokens: cached, Index: uint32(o.index),
			}}})
		}
		if o.finish == "abort" {
			return status.Error(codes.Internal, "request aborted")
		}
		return sendFrames(o, g.stream, chunk, func(out []uint32) error {
			c := &tokenspeed.GenerateComplete{OutputIds: out, FinishReason: o.finish, PromptTokens: prompt,
				CompletionTokens: uint32(len(o.all)), CachedTokens: cached, Index: uint32(o.index)}
			if tok, ok := matchedStopToken(o, g.stopIDs); ok {
				c.MatchedStop = &tokenspeed.GenerateComplete_MatchedTokenId{MatchedTokenId: tok}
			}
			return stream.Send(&tokenspeed.GenerateResponse{RequestId: id, Response: &tokenspeed.GenerateResponse_Complete{Complete: c}})
		})
	})
}

func (t *tokenspeedService) HealthCheck(context.Context, *tokenspeed.HealthCheckRequest) (*tokenspeed.HealthCheckResponse, error) {
	return &tokenspeed.HealthCheckResponse{Healthy: t.s.healthy(), Message: "ok"}, nil
}

func (t *tokenspeedService) Abort(_ context.Context, req *tokenspeed.AbortRequest) (*tokenspeed.AbortResponse, error) {
	ok := t.s.abort(req.GetRequestId())
	return &tokenspeed.AbortResponse{Success: ok}, nil
}

func (t *tokenspeedService) GetModelInfo(context.Context, *tokenspeed.GetModelInfoRequest) (*tokenspeed.GetModelInfoResponse, error) {
	cfg := t.s.ranks[0].Config()
	return &tokenspeed.GetModelInfoResponse{
		ModelPath: t.s.cfg.Model, TokenizerPath: t.s.cfg.TokenizerPath, ServedModelName: t.s.cfg.Model,
		MaxContextLength: int32(cfg.MaxModelLen), MaxReqInputLen: int32(cfg.MaxModelLen), VocabSize: int32(cfg.VocabSize),
		EosTokenIds: t.s.eosIDs(), BosTokenId: t.s.cfg.BOSTokenID,
	}, nil
}

func (t *tokenspeedService) GetServerInfo(context.Context, *tokenspeed.GetServerInfoRequest) (*tokenspeed.GetServerInfoResponse, error) {
	cfg := t.s.ranks[0].Config()
	return &tokenspeed.GetServerInfoResponse{
		ServerArgs: t.s.serverArgs(), ActiveRequests: int32(t.s.ranks.NumRunning() + t.s.ranks.NumWaiting()),
		UptimeSeconds: timeSince(t.s.start), MaxTotalNumTokens: int32(cfg.NumBlocks * cfg.BlockSize),
		TokenspeedVersion: simVersion, StartTime: timestamppb.New(t.s.start),
	}, nil
}

func (t *tokenspeedService) GetLoads(_ context.Context, req *tokenspeed.GetLoadsRequest) (*tokenspeed.GetLoadsResponse, error) {
	resp := &tokenspeed.GetLoadsResponse{Timestamp: nowISO(), Version: simVersion, DpRankCount: int32(len(t.s.ranks))}
	for _, l := range t.s.loads(req.DpRank) {
		resp.Loads = append(resp.Loads, &tokenspeed.SchedulerLoad{
			DpRank: int32(l.rank), NumRunningReqs: int32(l.running), NumWaitingReqs: int32(l.waiting),
			NumTotalReqs: int32(l.running + l.waiting), NumUsedTokens: int32(l.usedTokens), MaxTotalNumTokens: int32(l.maxTokens),
			MaxRunningRequests: int32(l.maxRunning), TokenUsage: l.usage,
		})
	}
	return resp, nil
}

func (t *tokenspeedService) FlushCache(context.Context, *common.FlushCacheRequest) (*common.FlushCacheResponse, error) {
	ok, msg := t.s.flush()
	return &common.FlushCacheResponse{Success: ok, Message: msg}, nil
}

func (t *tokenspeedService) SubscribeKvEvents(req *common.SubscribeKvEventsRequest, stream grpc.ServerStreamingServer[common.KvEventBatch]) error {
	return t.s.subscribeKvEvents(req, stream)
}
