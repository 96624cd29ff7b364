package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/worker"
)

// runner is an event source: a *kvbridge.GRPCSource or *kvbridge.ZMQSource.
type runner interface {
	Run(ctx context.Context) error
}

// tailFlags are the flags of `kvbridge tail`.
type tailFlags struct {
	zmq, replay, topic string
	dpSize             int
	grpc               string
	runtime            worker.Runtime
	tls                clientTLSFlags
	count              int
	timeout            time.Duration
	logLevel           string
}

func parseTailFlags(args []string, stderr io.Writer) (*tailFlags, error) {
	var f tailFlags
	fs := flag.NewFlagSet("kvbridge tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.zmq, "zmq", "", "engine ZMQ PUB endpoint of DP rank 0, e.g. tcp://127.0.0.1:5557 (rank r on port+r)")
	fs.StringVar(&f.replay, "replay", "", "engine ZMQ ROUTER replay endpoint of DP rank 0, e.g. tcp://127.0.0.1:5558")
	fs.StringVar(&f.topic, "topic", "", "ZMQ topic filter (vLLM default: empty)")
	fs.IntVar(&f.dpSize, "dp-size", 1, "number of data-parallel ranks to subscribe to (ZMQ)")
	fs.StringVar(&f.grpc, "grpc", "", "gRPC worker or `kvbridge serve` address HOST:PORT (SubscribeKvEvents)")
	fs.Var(&f.runtime, "runtime", "engine service for --grpc: vllm, sglang or tokenspeed")
	f.tls.register(fs)
	fs.IntVar(&f.count, "count", 0, "exit after this many events (0 = no limit)")
	fs.DurationVar(&f.timeout, "timeout", 0, "exit after this long without an event, e.g. 8s (0 = never)")
	fs.StringVar(&f.logLevel, "log-level", "info", "stderr log level: debug, info, warn, error")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: kvbridge tail (--zmq tcp://HOST:PORT [--topic T] [--replay tcp://HOST:PORT] [--dp-size N]
                     | --grpc HOST:PORT --runtime vllm|sglang|tokenspeed) [--count N] [--timeout D]

Prints one JSON object per KV-cache event on stdout:
  {"seq":N,"rank":R,"ts":F,"type":"stored","parent":H|null,"block_size":B,"blocks":[{"hash":H,"tokens":[...]}],"lora_id":L|null,"medium":M|null}
  {"seq":N,"rank":R,"ts":F,"type":"removed","hashes":[H,...]}
  {"seq":N,"rank":R,"ts":F,"type":"cleared"}
Hashes are the engine's block hashes folded to signed 64 bits. Warnings go to stderr.
Exit status: 0 after --count events, on --timeout (when --count is 0) or on interrupt;
1 when the stream is unavailable or --timeout passes before --count events; 2 on usage errors.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case (f.zmq == "") == (f.grpc == ""):
		return nil, errors.New("exactly one of --zmq and --grpc is required")
	case f.grpc != "" && f.runtime == "":
		return nil, errors.New("--grpc needs --runtime vllm|sglang|tokenspeed")
	case f.grpc != "" && (f.replay != "" || f.topic != "" || f.dpSize != 1):
		return nil, errors.New("--replay, --topic and --dp-size apply to --zmq only")
	case f.zmq != "" && f.runtime != "":
		return nil, errors.New("--runtime applies to --grpc only")
	case f.dpSize < 1:
		return nil, fmt.Errorf("--dp-size %d: must be at least 1", f.dpSize)
	case f.count < 0:
		return nil, fmt.Errorf("--count %d: must not be negative", f.count)
	case f.timeout < 0:
		return nil, fmt.Errorf("--timeout %v: must not be negative", f.timeout)
	case f.zmq != "" && f.tls.given():
		return nil, errors.New("--tls flags apply to --grpc only (ZMQ has no TLS)")
	}
	f.grpc = strings.TrimPrefix(f.grpc, "grpc://")
	return &f, nil
}

func runTail(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseTailFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "kvbridge tail: %v\n", err)
		return exitUsage
	}
	log, err := newLogger(stderr, f.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "kvbridge tail: %v\n", err)
		return exitUsage
	}
	defer func() { _ = log.Sync() }()

	p := newTailPrinter(stdout, f.count, log)
	var src runner
	if f.grpc != "" {
		creds, err := f.tls.credentials()
		if err != nil {
			fmt.Fprintf(stderr, "kvbridge tail: %v\n", err)
			return exitUsage
		}
		conn, err := grpc.NewClient("passthrough:///"+f.grpc, grpc.WithTransportCredentials(creds))
		if err != nil {
			fmt.Fprintf(stderr, "kvbridge tail: dial %s: %v\n", f.grpc, err)
			return exitError
		}
		defer conn.Close()
		src, err = kvbridge.NewGRPCSource(kvbridge.GRPCConfig{Runtime: f.runtime, Worker: f.grpc}, conn, p, log, nil)
		if err != nil {
			fmt.Fprintf(stderr, "kvbridge tail: %v\n", err)
			return exitUsage
		}
	} else {
		zsrc, closeSrc, err := newZMQSource(zmqOptions{endpoint: f.zmq, replay: f.replay, topic: f.topic, dpSize: f.dpSize}, p, log)
		if err != nil {
			fmt.Fprintf(stderr, "kvbridge tail: %v\n", err)
			return exitUsage
		}
		defer closeSrc()
		src = zsrc
	}
	return tailLoop(ctx, src, p, f, stderr)
}

// tailLoop runs src until the count is reached, the idle timeout passes, ctx ends or src
// fails, and returns the exit code.
func tailLoop(ctx context.Context, src runner, p *tailPrinter, f *tailFlags, stderr io.Writer) int {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- src.Run(rctx) }()

	var idle <-chan time.Time
	var timer *time.Timer
	if f.timeout > 0 {
		timer = time.NewTimer(f.timeout)
		defer timer.Stop()
		idle = timer.C
	}
	// finish stops the source (unless it already returned with err) and returns the exit code.
	// It writes to stderr only once the source has returned: the source logs to stderr too.
	finish := func(code int, returned bool, err error, note string) int {
		if !returned {
			cancel()
			err = <-runErr
		}
		if note != "" {
			fmt.Fprintln(stderr, note)
		}
		if werr := p.flush(); werr != nil && code == exitOK {
			fmt.Fprintf(stderr, "kvbridge tail: write stdout: %v\n", werr)
			code = exitError
		}
		switch {
		case errors.Is(err, kvbridge.ErrUnimplemented):
			fmt.Fprintf(stderr, "kvbridge tail: %s serves no KV events (UNIMPLEMENTED): the gateway uses its approximate tree for this worker\n", f.grpc)
			code = exitError
		case err != nil:
			fmt.Fprintf(stderr, "kvbridge tail: %v\n", err)
			code = exitError
		}
		return code
	}
	for {
		select {
		case <-p.activity:
			if timer != nil {
				timer.Reset(f.timeout) // Go ≥ 1.23: no stale tick after Reset
			}
		case <-p.done:
			return finish(exitOK, false, nil, "")
		case <-idle:
			if f.count > 0 {
				return finish(exitError, false, nil,
					fmt.Sprintf("kvbridge tail: no event for %v: got %d of %d events", f.timeout, p.printedCount(), f.count))
			}
			return finish(exitOK, false, nil, "")
		case err := <-runErr:
			return finish(exitOK, true, err, "")
		case <-ctx.Done():
			return finish(exitOK, false, nil, "")
		}
	}
}

// tailPrinter is the Consumer of `kvbridge tail`: it writes each event as one JSON line.
// Batch and Reset are called from the source's goroutine; printedCount, flush and the channels
// are safe from the main goroutine (flush only after Run has returned).
type tailPrinter struct {
	w     *bufio.Writer
	log   *zap.Logger
	limit int

	// activity gets a token after every batch (for the idle timeout); done is closed once limit
	// events are printed or stdout fails.
	activity chan struct{}
	done     chan struct{}
	doneOnce sync.Once

	// mu guards printed and werr.
	mu      sync.Mutex
	printed int
	werr    error

	buf []byte // source goroutine only
}

func newTailPrinter(w io.Writer, limit int, log *zap.Logger) *tailPrinter {
	return &tailPrinter{
		w:        bufio.NewWriterSize(w, 64<<10),
		log:      log,
		limit:    limit,
		activity: make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
}

// Batch prints b's events (up to the limit) and flushes, so that a live tail shows each batch
// as it arrives.
func (p *tailPrinter) Batch(rank int, b *indexer.Batch) bool {
	p.mu.Lock()
	if p.werr != nil || (p.limit > 0 && p.printed >= p.limit) {
		p.mu.Unlock()
		return false
	}
	n := len(b.Events)
	if p.limit > 0 {
		n = min(n, p.limit-p.printed)
	}
	p.mu.Unlock()

	for i := range n {
		p.buf = appendEventJSON(p.buf[:0], b.Seq, rank, b.Timestamp, &b.Events[i])
		_, _ = p.w.Write(p.buf) // a bufio.Writer keeps its first error: checked by Flush
	}
	err := p.w.Flush()

	p.mu.Lock()
	p.printed += n
	if err != nil {
		p.werr = err
	}
	stop := err != nil || (p.limit > 0 && p.printed >= p.limit)
	p.mu.Unlock()

	select {
	case p.activity <- struct{}{}:
	default:
	}
	if stop {
		p.doneOnce.Do(func() { close(p.done) })
	}
	return false
}

// Reset reports a worker reset on stderr only: stdout carries events, nothing else.
func (p *tailPrinter) Reset(rank int, reason string) {
	p.log.Warn("worker reset: drop what you know of this rank's cache", zap.Int("rank", rank), zap.String("reason", reason))
}

func (p *tailPrinter) printedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.printed
}

// flush flushes stdout and returns the first write error. Call only after Run has returned.
func (p *tailPrinter) flush() error {
	err := p.w.Flush()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.werr != nil {
		return p.werr
	}
	return err
}

// appendEventJSON appends one event as a JSON line in the documented, stable field order:
//
//	{"seq":N,"rank":R,"ts":F,"type":"stored","parent":H|null,"block_size":B,"blocks":[{"hash":H,"tokens":[...]}],"lora_id":L|null,"medium":M|null}
//	{"seq":N,"rank":R,"ts":F,"type":"removed","hashes":[H,...]}
//	{"seq":N,"rank":R,"ts":F,"type":"cleared"}
//
// Every hash is the folded signed 64-bit value (int64 of the engine hash). A stored event whose
// tokens are not block_size per block prints empty token lists (the sources never deliver one).
func appendEventJSON(buf []byte, seq uint64, rank int, ts float64, e *indexer.Event) []byte {
	buf = append(buf, `{"seq":`...)
	buf = strconv.AppendUint(buf, seq, 10)
	buf = append(buf, `,"rank":`...)
	buf = strconv.AppendInt(buf, int64(rank), 10)
	buf = append(buf, `,"ts":`...)
	if math.IsNaN(ts) || math.IsInf(ts, 0) {
		buf = append(buf, "null"...)
	} else {
		buf = strconv.AppendFloat(buf, ts, 'f', -1, 64)
	}
	buf = append(buf, `,"type":"`...)
	buf = append(buf, e.Kind.String()...)
	buf = append(buf, '"')
	switch e.Kind {
	case indexer.EventStored:
		buf = append(buf, `,"parent":`...)
		if e.HasParent && e.Parent != 0 {
			buf = strconv.AppendInt(buf, int64(e.Parent), 10)
		} else {
			buf = append(buf, "null"...)
		}
		buf = append(buf, `,"block_size":`...)
		buf = strconv.AppendInt(buf, int64(e.BlockSize), 10)
		buf = append(buf, `,"blocks":[`...)
		split := e.BlockSize > 0 && len(e.Tokens) == e.BlockSize*len(e.Hashes)
		for i, h := range e.Hashes {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, `{"hash":`...)
			buf = strconv.AppendInt(buf, int64(h), 10)
			buf = append(buf, `,"tokens":[`...)
			if split {
				for j, t := range e.Tokens[i*e.BlockSize : (i+1)*e.BlockSize] {
					if j > 0 {
						buf = append(buf, ',')
					}
					buf = strconv.AppendUint(buf, uint64(t), 10)
				}
			}
			buf = append(buf, "]}"...)
		}
		buf = append(buf, `],"lora_id":`...)
		if e.HasLoraID {
			buf = strconv.AppendInt(buf, e.LoraID, 10)
		} else {
			buf = append(buf, "null"...)
		}
		buf = append(buf, `,"medium":`...)
		if e.Medium != "" {
			buf = openai.AppendString(buf, e.Medium)
		} else {
			buf = append(buf, "null"...)
		}
	case indexer.EventRemoved:
		buf = append(buf, `,"hashes":[`...)
		for i, h := range e.Hashes {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = strconv.AppendInt(buf, int64(h), 10)
		}
		buf = append(buf, ']')
	}
	return append(buf, "}\n"...)
}

var _ kvbridge.Consumer = (*tailPrinter)(nil)
