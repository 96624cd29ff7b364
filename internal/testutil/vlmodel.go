package testutil

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// RepoRoot is the module's root directory (found from this file's path).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// VLModelDir assembles a Qwen2.5-VL-style model directory in a temporary directory
// (testdata/models/qwen2_5_vl/README.md): the committed config.json and
// preprocessor_config.json, the Qwen tokenizer of the test data and the Qwen2.5-VL template of
// the template sweep as the processor's chat_template.json. It fails t when the test data is
// missing (`make testdata`).
func VLModelDir(t testing.TB) string {
	t.Helper()
	root := RepoRoot()
	dir := t.TempDir()
	copyFile := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("VL model dir: %v (run `make testdata`)", err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(filepath.Join(root, "testdata", "models", "qwen2_5_vl", "config.json"), "config.json")
	copyFile(filepath.Join(root, "testdata", "models", "qwen2_5_vl", "preprocessor_config.json"), "preprocessor_config.json")
	copyFile(filepath.Join(root, ".cache", "tokenizers", "qwen3", "tokenizer.json"), "tokenizer.json")
	copyFile(filepath.Join(root, ".cache", "tokenizers", "qwen3", "tokenizer_config.json"), "tokenizer_config.json")
	src, err := os.ReadFile(filepath.Join(root, ".cache", "templates", "sweep", "qwen2.5vl_latest.jinja"))
	if err != nil {
		t.Fatalf("VL model dir: %v (run `make testdata`)", err)
	}
	b, _ := json.Marshal(map[string]string{"chat_template": string(src)})
	if err := os.WriteFile(filepath.Join(dir, "chat_template.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Gemma3ModelDir assembles a Gemma 3-style model directory in a temporary directory
// (testdata/models/gemma3/README.md): the committed config.json, preprocessor_config.json and
// processor_config.json, and the Gemma 3 tokenizer of the test data with its chat template. It
// fails t when the test data is missing (`make testdata`).
func Gemma3ModelDir(t testing.TB) string {
	t.Helper()
	root := RepoRoot()
	dir := t.TempDir()
	for _, f := range []struct{ src, name string }{
		{filepath.Join(root, "testdata", "models", "gemma3"), "config.json"},
		{filepath.Join(root, "testdata", "models", "gemma3"), "preprocessor_config.json"},
		{filepath.Join(root, "testdata", "models", "gemma3"), "processor_config.json"},
		{filepath.Join(root, ".cache", "tokenizers", "gemma3"), "tokenizer.json"},
		{filepath.Join(root, ".cache", "tokenizers", "gemma3"), "tokenizer_config.json"},
	} {
		b, err := os.ReadFile(filepath.Join(f.src, f.name))
		if err != nil {
			t.Fatalf("Gemma 3 model dir: %v (run `make testdata`)", err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
