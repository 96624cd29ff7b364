package main

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

const defaultTestTimeout = 30 * time.Second

// moduleRoot finds the directory holding go.mod above the test.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
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
