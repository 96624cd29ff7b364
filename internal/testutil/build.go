package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// RepoRoot returns the module root (the directory holding go.mod), found by walking up from the
// working directory; tests run in their package directory, so this works from any package.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("testutil: repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testutil: repo root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Build runs `go build -o outDir/<name> ./cmd/<name>` in the module root for each name (for
// example "gateway", "simworker") and returns the binaries' paths by name. It builds all names
// in one go command so the shared packages compile once. The go command's output is part of the
// error when the build fails.
func Build(ctx context.Context, outDir string, names ...string) (map[string]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	args := []string{"build", "-o", outDir + string(filepath.Separator)}
	paths := make(map[string]string, len(names))
	for _, n := range names {
		args = append(args, "./cmd/"+n)
		paths[n] = filepath.Join(outDir, n)
	}
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("testutil: go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return paths, nil
}
