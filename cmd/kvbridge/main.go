// Command kvbridge is the KV-event sidecar and operator tool of kvgate (DESIGN.md §2, issue 2).
//
//	kvbridge tail --zmq tcp://HOST:PORT [--topic T] [--replay tcp://HOST:PORT] [--dp-size N] [--count N] [--timeout D]
//	kvbridge tail --grpc HOST:PORT --runtime vllm|sglang|tokenspeed [--count N] [--timeout D]
//	kvbridge serve --zmq tcp://HOST:PORT [--replay tcp://HOST:PORT] [--topic T] [--dp-size N]
//	               --runtime vllm|sglang|tokenspeed --listen HOST:PORT [--history 10000]
//
// `tail` connects to a live KV-event stream and prints one JSON object per event on stdout (the
// format is documented in tail.go and in docs); everything else (stream up/down, gaps, replays,
// resets, malformed frames) goes to stderr, so stdout is exactly the events.
//
// `serve` subscribes to an engine's local ZMQ publisher (every DP rank, with replay) and serves
// the SMG SubscribeKvEvents gRPC stream under the chosen engine service's name, with its own
// sequence numbers from 1, dp_rank on each batch and a bounded history for resuming clients:
// a Go replacement for SMG's Python servicer bridge.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // runtime failure: no event stream, connection setup, --count not reached
	exitUsage = 2 // bad command line
)

const usage = `usage:
  kvbridge tail --zmq tcp://HOST:PORT [--topic T] [--replay tcp://HOST:PORT] [--dp-size N] [--count N] [--timeout D]
  kvbridge tail --grpc HOST:PORT --runtime vllm|sglang|tokenspeed [--count N] [--timeout D]
  kvbridge serve --zmq tcp://HOST:PORT [--replay tcp://HOST:PORT] [--topic T] [--dp-size N]
                 --runtime vllm|sglang|tokenspeed --listen HOST:PORT [--history 10000]
Run "kvbridge tail -h" or "kvbridge serve -h" for the flags.
`

// run is main without the process: it parses args, runs the subcommand until ctx is done or
// it finishes, and returns the exit code. Tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "tail":
		return runTail(ctx, args[1:], stdout, stderr)
	case "serve":
		return runServe(ctx, args[1:], stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "kvbridge: unknown command %q\n%s", args[0], usage)
	return exitUsage
}

// newLogger returns a console logger on w (stderr) at level.
func newLogger(w io.Writer, level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("kvbridge: --log-level: %w", err)
	}
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core), nil
}
