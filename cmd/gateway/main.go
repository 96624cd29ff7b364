// Command gateway is kvgate's product binary: a cache-aware, OpenAI-compatible gateway in front
// of LLM inference workers (vLLM, SGLang, TokenSpeed, any OpenAI server). See `gateway --help`
// and DESIGN.md §7.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvgate/kvgate/pkg/chat"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is main without the process: it dispatches `gateway tokenize ...`, `gateway render ...`
// and the hidden `gateway render-sandbox` (the child process of chat.Sandbox), and otherwise
// serves until SIGTERM or SIGINT, then drains and returns 0; SIGHUP reloads the client keys.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "tokenize":
			return runTokenize(args[1:], stdin, stdout, stderr)
		case "render":
			return runRender(args[1:], stdin, stdout, stderr)
		case renderSandboxCommand:
			return chat.ServeSandbox(stdin, stdout)
		}
	}
	o, err := parseOptions(args, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// SIGHUP re-reads --api-key-file; caught always, so it never kills the gateway.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := serve(ctx, o, stderr, hooks{reload: hup}); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
