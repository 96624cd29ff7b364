package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/deploy"
	"github.com/kvgate/kvgate/internal/harness"
)

// survivorTimeout bounds the wait, after a command, for the processes it started to be gone.
const survivorTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	// Issue 17: however the command ended, nothing it started may outlive it (the fleet's
	// nginx workers included, which only this process can recognise).
	sctx, cancel := context.WithTimeout(context.Background(), survivorTimeout)
	leak := harness.CheckNoSurvivors(sctx)
	cancel()
	if errors.Is(err, flag.ErrHelp) {
		err = nil
	}
	if err = errors.Join(err, leak); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

const usage = `usage: bench demo|bench [flags]   (see -h of each)
       bench report -logs DIR [bench flags]   (re-render docs from a -keep-logs run)
       bench nginx-conf [-listen ADDR] [-standalone -prefix DIR] HOST:PORT...`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return errors.New("no command")
	}
	switch args[0] {
	case "demo":
		o, err := parseOptions("demo", args[1:], demoDefaults, stderr)
		if err != nil {
			return err
		}
		return runDemo(ctx, o, stdout, stderr)
	case "bench":
		o, err := parseOptions("bench", args[1:], benchDefaults, stderr)
		if err != nil {
			return err
		}
		return runBench(ctx, o, stdout, stderr)
	case "report":
		o, err := parseOptions("report", args[1:], benchDefaults, stderr)
		if err != nil {
			return err
		}
		return runReport(o, stdout, stderr)
	case "nginx-conf":
		return nginxConf(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// nginxConf prints the SSE-safe round-robin nginx configuration for the given replicas.
func nginxConf(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nginx-conf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "80", "nginx listen address")
	standalone := fs.Bool("standalone", false, "a complete nginx.conf (pid, logs, temp files under -prefix) instead of a conf.d snippet")
	prefix := fs.String("prefix", "", "with -standalone: directory for pid, logs and temp files")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conf, err := deploy.NginxConfig(deploy.NginxParams{Listen: *listen, Upstreams: fs.Args(), Standalone: *standalone, Prefix: strings.TrimRight(*prefix, "/")})
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, conf)
	return err
}
