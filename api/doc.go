// Package api holds kvgate's protobuf definitions of the SMG engine gRPC interface
// (wire/smg-grpc.md) and the Go code generated from them. It contains no hand-written logic.
//
// The .proto sources live under api/proto, at paths that mirror their protobuf packages
// (smg/grpc/common.proto, vllm/grpc/vllm_engine.proto, ...) so that their names in the
// protobuf-go global registry do not collide with other projects' bare "common.proto".
// File paths, Go packages and comments never travel on the wire; package, service and RPC
// names, field numbers, wire types, oneof groups and proto3 optional presence match the
// upstream SMG protos exactly, which compat_test.go proves by decoding hand-built bytes.
//
// Which package to use:
//   - api/common (smg.grpc.common): KV-event messages (SubscribeKvEventsRequest, KvEventBatch,
//     ...), the tokenizer chunk and admin messages, shared by every engine service.
//   - api/vllm (vllm.grpc.engine.VllmEngine): vLLM workers. Delta chunk semantics.
//   - api/sglang (sglang.grpc.scheduler.SglangScheduler): SGLang workers.
//   - api/tokenspeed (tokenspeed.grpc.scheduler.TokenSpeedScheduler): TokenSpeed workers. Note
//     its TokenizedInput numbers input_ids 1 (vLLM and SGLang use 2).
//
// Regenerate with `make generate` (tools/generate.sh: protoc from Debian's protobuf-compiler,
// protoc-gen-go v1.36.12 and protoc-gen-go-grpc v1.6.2); the output is committed and must be
// reproduced byte for byte.
package api
