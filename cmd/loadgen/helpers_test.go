package main

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

const defaultTestTimeout = 30 * time.Second

// moduleRoot finds the directory holding go.mod above the test.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// realTokenizer loads a tokenizer fetched by `make testdata`; it fails (not skips) when the
// cache is missing, like pkg/tokenizer's golden tests.
func realTokenizer(t *testing.T, family string) (string, *hfCodec) {
	t.Helper()
	path := filepath.Join(moduleRoot(t), ".cache", "tokenizers", family, "tokenizer.json")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("tokenizer %s missing (%v): run `make testdata`", family, err)
	}
	codecsMu.Lock()
	defer codecsMu.Unlock()
	if c, ok := codecs[family]; ok {
		return path, c
	}
	c, err := loadCodec(path)
	if err != nil {
		t.Fatalf("loadCodec(%s): %v", path, err)
	}
	codecs[family] = c
	return path, c
}

// codecs caches loaded tokenizers across tests (loading one takes seconds under -race); a
// *hfCodec is immutable and safe for concurrent use.
var (
	codecsMu sync.Mutex
	codecs   = map[string]*hfCodec{}
)
