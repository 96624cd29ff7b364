#!/usr/bin/env bash
# Regenerates the committed protobuf/gRPC Go code under api/ byte for byte.
# Generators are installed at pinned versions into .cache/bin (git-ignored) so the output does
# not depend on whatever is on PATH; protoc comes from Debian's protobuf-compiler (tools/deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=$root/.cache/bin
mkdir -p "$bin"
# One go install per module: go install rejects versioned packages from different modules at once.
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
export PATH=$bin:$PATH

module=github.com/kvgate/kvgate
protos=(
  smg/grpc/common.proto
  vllm/grpc/vllm_engine.proto
  sglang/grpc/sglang_scheduler.proto
  tokenspeed/grpc/tokenspeed_scheduler.proto
)
# Remove stale generated files first so a renamed/removed proto leaves nothing behind.
find api -name '*.pb.go' -delete
protoc -I api/proto \
  --go_out=. --go_opt=module=$module \
  --go-grpc_out=. --go-grpc_opt=module=$module \
  "${protos[@]}"
echo "generate: api/ regenerated with $(protoc --version)"
