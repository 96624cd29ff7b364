//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/harness"
)

// TestDeployFilesUseRealGatewayFlags checks that every flag the shipped deployment files pass
// to the gateway (Kubernetes args, the systemd ExecStart line, the Dockerfile's example) is one
// the built binary documents in --help, so a renamed flag cannot silently break a deployment.
func TestDeployFilesUseRealGatewayFlags(t *testing.T) {
	out, err := harness.CombinedOutput(t.Context(), harness.Command{Path: bins.Gateway, Args: []string{"--help"}})
	if err != nil && len(out) == 0 {
		t.Fatalf("gateway --help: %v", err)
	}
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		known[m[1]] = true
	}
	mustf(t, len(known) > 10 && known["worker"] && known["prometheus-port"], "could not read the flags from gateway --help:\n%s", out)

	flagRE := regexp.MustCompile(`(?:^|[\s"'\[])--([a-z][a-z0-9-]*)`)
	sources := map[string]string{}
	for _, f := range []string{"deploy/k8s/deployment.yaml", "deploy/systemd/kvgate.service", "deploy/Dockerfile"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		switch {
		case strings.HasSuffix(f, ".service"):
			// Only the gateway command line.
			for _, line := range strings.Split(text, "\n") {
				if strings.HasPrefix(line, "ExecStart=") {
					sources[f] = line
				}
			}
		case strings.HasSuffix(f, "Dockerfile"):
			for _, line := range strings.Split(text, "\n") {
				if strings.Contains(line, "docker run") {
					sources[f] += line + "\n"
				}
			}
		default:
			sources[f] = text
		}
	}
	checked := 0
	for f, text := range sources {
		for _, m := range flagRE.FindAllStringSubmatch(text, -1) {
			checked++
			if !known[m[1]] {
				t.Errorf("%s uses --%s, which gateway --help does not list", f, m[1])
			}
		}
	}
	mustf(t, checked >= 10, "checked only %d flags; the deploy files changed shape?", checked)
}
