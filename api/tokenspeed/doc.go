// Package tokenspeed is the generated Go code for protobuf package tokenspeed.grpc.scheduler
// (api/proto/tokenspeed/grpc/tokenspeed_scheduler.proto): the TokenSpeedScheduler service of
// SMG-compatible TokenSpeed workers. Choose it for workers with runtime=tokenspeed; mind that
// TokenizedInput.input_ids is field 1 here (2 in vLLM and SGLang). See package api.
package tokenspeed
