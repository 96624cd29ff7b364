// Package vllm is the generated Go code for protobuf package vllm.grpc.engine
// (api/proto/vllm/grpc/vllm_engine.proto): the VllmEngine service of SMG-compatible vLLM
// workers. Choose it for workers with runtime=vllm; its Generate stream has delta chunk
// semantics (wire/smg-grpc.md §7.2). See package api for the wire-compatibility rules.
package vllm
