package indexer

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type keyVector struct {
	BlockSize int      `json:"block_size"`
	Tokens    []uint32 `json:"tokens"`
	Blocks    []struct {
		Content uint64 `json:"content"`
		Prefix  uint64 `json:"prefix"`
	} `json:"blocks"`
}

func loadKeyVectors(t *testing.T) []keyVector {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/fixtures/hashes/block_keys.json")
	if err != nil {
		t.Fatalf("read golden vectors: %v", err)
	}
	var f struct {
		Vectors []keyVector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("decode golden vectors: %v", err)
	}
	if len(f.Vectors) == 0 {
		t.Fatal("no golden vectors")
	}
	return f.Vectors
}

func TestBlockKeysGolden(t *testing.T) {
	for _, v := range loadKeyVectors(t) {
		t.Run("", func(t *testing.T) {
			var wantContent, wantPrefix []uint64
			for _, b := range v.Blocks {
				wantContent = append(wantContent, b.Content)
				wantPrefix = append(wantPrefix, b.Prefix)
			}
			var gotContent, gotPortable []uint64
			for i := 0; i+v.BlockSize <= len(v.Tokens); i += v.BlockSize {
				gotContent = append(gotContent, ContentHash(v.Tokens[i:i+v.BlockSize]))
				gotPortable = append(gotPortable, contentHashPortable(v.Tokens[i:i+v.BlockSize]))
			}
			if diff := cmp.Diff(wantContent, gotContent); diff != "" {
				t.Errorf("block size %d: content hashes (-want +got):\n%s", v.BlockSize, diff)
			}
			if diff := cmp.Diff(wantContent, gotPortable); diff != "" {
				t.Errorf("block size %d: portable content hashes (-want +got):\n%s", v.BlockSize, diff)
			}
			got := AppendBlockKeys(nil, v.Tokens, v.BlockSize, "")
			if diff := cmp.Diff(wantPrefix, got); diff != "" {
				t.Errorf("block size %d: prefix keys (-want +got):\n%s", v.BlockSize, diff)
			}
		})
	}
}

func TestPortableLongInput(t *testing.T) {
	toks := make([]uint32, 1000) // > the 512-byte stack buffer: exercises the streaming path
	for i := range toks {
		toks[i] = uint32(i * 7919)
	}
	if got, want := contentHashPortable(toks), ContentHash(toks); got != want {
		t.Errorf("contentHashPortable = %d, want %d", got, want)
	}
}

func TestNamespace(t *testing.T) {
	tests := []struct {
		name  string
		lora  string
		id    int64
		hasID bool
		salt  string
		want  string
	}{
		{"base", "", 0, false, "", ""},
		{"lora name wins over id", "sim-lora", 1, true, "", "sim-lora"},
		{"lora id only", "", 7, true, "", "lora:7"},
		{"salt only", "", 0, false, "s1", "|salt:s1"},
		{"lora and salt", "a", 0, false, "s1", "a|salt:s1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Namespace(tt.lora, tt.id, tt.hasID, tt.salt); got != tt.want {
				t.Errorf("Namespace = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNamespacedKeys(t *testing.T) {
	toks := make([]uint32, 48)
	for i := range toks {
		toks[i] = uint32(i + 100)
	}
	plain := AppendBlockKeys(nil, toks, 16, "")
	ns := AppendBlockKeys(nil, toks, 16, "sim-lora")
	// Block 0 mixes the namespace; later blocks chain from it as usual.
	c0 := ContentHash(toks[:16])
	if ns[0] != RootHash(c0, "sim-lora") || ns[0] == plain[0] {
		t.Errorf("namespaced block 0 = %d, want RootHash %d != plain %d", ns[0], RootHash(c0, "sim-lora"), plain[0])
	}
	for i := 1; i < 3; i++ {
		if want := ChainHash(ns[i-1], ContentHash(toks[16*i:16*i+16])); ns[i] != want {
			t.Errorf("namespaced key %d = %d, want %d", i, ns[i], want)
		}
	}
	long := string(make([]byte, 300)) // longer than the stack buffer
	if RootHash(c0, long) == RootHash(c0, long[:299]) {
		t.Error("RootHash ignores namespace bytes past the stack buffer")
	}
	if got := AppendBlockKeys(nil, toks[:15], 16, ""); len(got) != 0 {
		t.Errorf("partial block: got %d keys, want 0", len(got))
	}
	if got := AppendBlockKeys(nil, toks, 0, ""); len(got) != 0 {
		t.Errorf("block size 0: got %d keys, want 0", len(got))
	}
}

func TestAppendBlockKeysAllocs(t *testing.T) {
	toks := make([]uint32, 4096)
	for i := range toks {
		toks[i] = uint32(i)
	}
	buf := make([]uint64, 0, 256)
	for _, ns := range []string{"", "sim-lora|salt:x"} {
		allocs := testing.AllocsPerRun(100, func() {
			buf = AppendBlockKeys(buf[:0], toks, 16, ns)
		})
		if allocs != 0 {
			t.Errorf("namespace %q: %v allocs per call, want 0", ns, allocs)
		}
	}
}
