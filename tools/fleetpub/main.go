// Command fleetpub measures one gateway process fed the KV-event streams of a large synthetic
// fleet (internal/fleetpub; docs/scaling.md):
//
//	go run ./tools/fleetpub -workers 1024 -duration 30s
//	go run ./tools/fleetpub -workers 1024 -duration 20s -faults 20s   # then flaps and a partition
//
// The last lines are machine-readable: SCALING workers=N ... and, with -faults,
// SCALINGFAULTS workers=N ....
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/internal/fleetpub"
	"github.com/kvgate/kvgate/internal/harness"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	leak := harness.CheckNoSurvivors(sctx)
	cancel()
	if errors.Is(err, flag.ErrHelp) {
		err = nil
	}
	if err = errors.Join(err, leak); err != nil {
		fmt.Fprintln(os.Stderr, "fleetpub:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	o := fleetpub.DefaultOptions()
	fs := flag.NewFlagSet("fleetpub", flag.ContinueOnError)
	fs.IntVar(&o.Workers, "workers", o.Workers, "simulated engines")
	fs.IntVar(&o.Blocks, "blocks", o.Blocks, "cache capacity of each engine, in blocks of 16 tokens")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "block events (stored + removed) per second per engine in the steady state")
	fs.Float64Var(&o.FillRate, "fill-rate", o.FillRate, "block events per second while filling the caches")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "steady-state measurement")
	fs.DurationVar(&o.Idle, "idle", o.Idle, "idle measurement before it (health checks and scrapes, no events)")
	fs.Float64Var(&o.RequestsPerSecond, "requests", o.RequestsPerSecond, "4096-token completions per second sent to the gateway while events flow")
	fs.StringVar(&o.Bin, "bin", o.Bin, "directory holding the gateway binary (make build)")
	fs.StringVar(&o.Tokenizer, "tokenizer", o.Tokenizer, "tokenizer.json for the gateway")
	fs.IntVar(&o.History, "history", o.History, "each engine's replay buffer, in batches")
	fs.StringVar(&o.LogDir, "logs", o.LogDir, "directory for the gateway's log (default: a temp dir)")
	fs.StringVar(&o.ProfileDir, "profiles", o.ProfileDir, "directory to keep the gateway's heap profiles in (base, filled, steady, faults .pb.gz) and its CPU profile over the steady state (steady.cpu.pb.gz); default: none kept")
	fs.DurationVar(&o.Faults.Duration, "faults", 0, "a fault phase of this length after the steady state (0: none)")
	fs.Float64Var(&o.Faults.FlapFraction, "flap-fraction", o.Faults.FlapFraction, "fault phase: share of the engines whose publisher flaps")
	fs.DurationVar(&o.Faults.FlapPeriod, "flap-period", o.Faults.FlapPeriod, "fault phase: a flapping publisher goes down once per period")
	fs.DurationVar(&o.Faults.FlapDown, "flap-down", o.Faults.FlapDown, "fault phase: and stays down this long")
	fs.DurationVar(&o.Faults.PartitionAt, "partition-at", o.Faults.PartitionAt, "fault phase: every publisher goes down this far into it")
	fs.DurationVar(&o.Faults.PartitionFor, "partition", o.Faults.PartitionFor, "fault phase: for this long (0: no partition)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	_, err := fleetpub.Run(ctx, o, stdout)
	return err
}
