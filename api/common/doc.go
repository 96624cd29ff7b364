// Package common is the generated Go code for protobuf package smg.grpc.common
// (api/proto/smg/grpc/common.proto): the KV-cache event stream messages consumed by
// pkg/kvbridge and served by `kvbridge serve`, the tokenizer transfer chunk and the admin
// messages shared by all engine services. See package api for the wire-compatibility rules.
package common
