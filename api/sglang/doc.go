// Package sglang is the generated Go code for protobuf package sglang.grpc.scheduler
// (api/proto/sglang/grpc/sglang_scheduler.proto): the SglangScheduler service of
// SMG-compatible SGLang workers. Choose it for workers with runtime=sglang; sampling scalars
// are not optional there, so always send explicit values. See package api.
package sglang
