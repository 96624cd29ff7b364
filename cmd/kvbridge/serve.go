package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/worker"
)

// serveFlags are the flags of `kvbridge serve`.
type serveFlags struct {
	zmq, replay, topic string
	dpSize             int
	listen             string
	runtime            worker.Runtime
	history            int
	snapshotMaxBlocks  int
	tlsCert, tlsKey    string
	tlsClientCA        string
	logLevel           string
}

func parseServeFlags(args []string, stderr io.Writer) (*serveFlags, error) {
	var f serveFlags
	fs := flag.NewFlagSet("kvbridge serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.zmq, "zmq", "", "engine ZMQ PUB endpoint of DP rank 0, e.g. tcp://127.0.0.1:5557 (rank r on port+r)")
	fs.StringVar(&f.replay, "replay", "", "engine ZMQ ROUTER replay endpoint of DP rank 0, e.g. tcp://127.0.0.1:5558")
	fs.StringVar(&f.topic, "topic", "", "ZMQ topic filter (vLLM default: empty)")
	fs.IntVar(&f.dpSize, "dp-size", 1, "number of data-parallel ranks to subscribe to")
	fs.Var(&f.runtime, "runtime", "engine service to serve: vllm, sglang or tokenspeed")
	fs.StringVar(&f.listen, "listen", "", "gRPC listen address HOST:PORT (port 0 picks one; the address is printed on stderr)")
	fs.IntVar(&f.history, "history", kvbridge.DefaultBridgeHistory, "batches kept for clients resuming from a cursor")
	fs.IntVar(&f.snapshotMaxBlocks, "snapshot-max-blocks", kvbridge.DefaultSnapshotMaxBlocks,
		"blocks kept per DP rank for late subscribers' snapshots (at least the engine's GPU block count); -1 disables snapshots")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate: serve gRPC over TLS (with --tls-key); gateways then use tls=true")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&f.tlsClientCA, "tls-client-ca", "", "PEM CAs: require client certificates signed by them (mTLS; needs --tls-cert)")
	fs.StringVar(&f.logLevel, "log-level", "info", "stderr log level: debug, info, warn, error")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: kvbridge serve --zmq tcp://HOST:PORT [--replay tcp://HOST:PORT] [--topic T] [--dp-size N]
                      --runtime vllm|sglang|tokenspeed --listen HOST:PORT [--history 10000]
                      [--snapshot-max-blocks 262144]
                      [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]

Subscribes to an engine's ZMQ KV-event publisher (every DP rank, with replay) and serves
SubscribeKvEvents (and HealthCheck) under the runtime's SMG service name. Batches of all ranks
are renumbered from 1 with dp_rank set; a client resuming from a cursor inside the history gets
the missed batches, an older cursor gets OUT_OF_RANGE. Each rank's current block set is kept
from its first batch on: once the history has rolled over, a client starting from 0 (and a
kvgate client with a cursor outside the history) gets a snapshot of those sets and then the
live batches. Prints "kvbridge: listening on ADDR" on stderr once it accepts connections.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	case f.zmq == "":
		return nil, errors.New("--zmq is required")
	case f.runtime == "":
		return nil, errors.New("--runtime vllm|sglang|tokenspeed is required")
	case f.listen == "":
		return nil, errors.New("--listen HOST:PORT is required")
	case f.dpSize < 1:
		return nil, fmt.Errorf("--dp-size %d: must be at least 1", f.dpSize)
	case f.history < 1:
		return nil, fmt.Errorf("--history %d: must be at least 1", f.history)
	case f.snapshotMaxBlocks == 0 || f.snapshotMaxBlocks < -1:
		return nil, fmt.Errorf("--snapshot-max-blocks %d: must be at least 1, or -1 to disable snapshots", f.snapshotMaxBlocks)
	case (f.tlsCert == "") != (f.tlsKey == "") || (f.tlsClientCA != "" && f.tlsCert == ""):
		return nil, errors.New("--tls-cert and --tls-key go together, and --tls-client-ca needs them")
	}
	return &f, nil
}

func runServe(ctx context.Context, args []string, stderr io.Writer) int {
	f, err := parseServeFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "kvbridge serve: %v\n", err)
		return exitUsage
	}
	log, err := newLogger(stderr, f.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "kvbridge serve: %v\n", err)
		return exitUsage
	}
	defer func() { _ = log.Sync() }()

	bridge, err := kvbridge.NewBridgeServer(kvbridge.BridgeConfig{Runtime: f.runtime, History: f.history, SnapshotMaxBlocks: f.snapshotMaxBlocks}, log)
	if err != nil {
		fmt.Fprintf(stderr, "kvbridge serve: %v\n", err)
		return exitUsage
	}
	src, closeSrc, err := newZMQSource(zmqOptions{endpoint: f.zmq, replay: f.replay, topic: f.topic, dpSize: f.dpSize}, bridge, log)
	if err != nil {
		fmt.Fprintf(stderr, "kvbridge serve: %v\n", err)
		return exitUsage
	}
	defer closeSrc()
	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		fmt.Fprintf(stderr, "kvbridge serve: listen %s: %v\n", f.listen, err)
		return exitError
	}
	opts := kvbridge.BridgeServerOptions()
	if f.tlsCert != "" {
		tc, err := worker.LoadServerTLS(f.tlsCert, f.tlsKey, f.tlsClientCA)
		if err != nil {
			lis.Close()
			fmt.Fprintf(stderr, "kvbridge serve: %v\n", err)
			return exitUsage
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	srv := grpc.NewServer(opts...)
	bridge.Register(srv)

	// Printed before any goroutine logs, so the line is never interleaved; the listener is
	// already bound, so clients may connect from now on.
	fmt.Fprintf(stderr, "kvbridge: listening on %s\n", lis.Addr())
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(lis); err != nil {
			return fmt.Errorf("serve grpc: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := src.Run(gctx); err != nil {
			return fmt.Errorf("zmq source: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		// End the streaming subscribers first, or GracefulStop would wait for them forever.
		bridge.Close()
		srv.GracefulStop()
		return nil
	})
	log.Info("serving SubscribeKvEvents", zap.Stringer("runtime", f.runtime), zap.String("zmq", f.zmq), zap.Bool("tls", f.tlsCert != ""), zap.Bool("mtls", f.tlsClientCA != ""),
		zap.String("replay", f.replay), zap.Int("dp_size", f.dpSize), zap.Int("history", f.history), zap.Int("snapshot_max_blocks", f.snapshotMaxBlocks))
	if err := g.Wait(); err != nil {
		fmt.Fprintf(stderr, "kvbridge serve: %v\n", err)
		return exitError
	}
	return exitOK
}

// clientTLSFlags are the TLS flags of a gRPC client (kvbridge tail --grpc), the client side of
// `kvbridge serve --tls-cert` and of TLS engines.
type clientTLSFlags struct {
	on                bool
	ca, cert, keyFile string
}

func (c *clientTLSFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.on, "tls", false, "connect to --grpc over TLS (implied by the other --tls-* flags)")
	fs.StringVar(&c.ca, "tls-ca", "", "PEM CAs trusted for --grpc (default: the system roots)")
	fs.StringVar(&c.cert, "tls-cert", "", "PEM client certificate for mTLS (with --tls-key)")
	fs.StringVar(&c.keyFile, "tls-key", "", "PEM private key of --tls-cert")
}

func (c *clientTLSFlags) given() bool { return c.on || c.ca != "" || c.cert != "" || c.keyFile != "" }

// credentials returns TLS credentials when any --tls flag is given, else plaintext.
func (c *clientTLSFlags) credentials() (credentials.TransportCredentials, error) {
	if !c.given() {
		return insecure.NewCredentials(), nil
	}
	tc, err := worker.LoadClientTLS(c.ca, c.cert, c.keyFile)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(tc), nil
}
