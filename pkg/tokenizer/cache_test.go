package tokenizer

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWordCache(t *testing.T) {
	c := newWordCache(64)
	words := make([]string, 200)
	for i := range words {
		words[i] = fmt.Sprintf("w%d-%s", i, "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz"[:i%60])
	}
	for i, w := range words {
		_, h, ok := c.get(w)
		if ok {
			t.Fatalf("get(%q) hit before put", w)
		}
		c.put(h, w, []uint32{uint32(i), uint32(i) + 1, 7}[:1+i%3])
		got, _, ok := c.get(w)
		if !ok {
			t.Fatalf("get(%q) missed right after put", w)
		}
		if diff := cmp.Diff([]uint32{uint32(i), uint32(i) + 1, 7}[:1+i%3], got); diff != "" {
			t.Errorf("get(%q) (-want +got):\n%s", w, diff)
		}
	}
	// 200 words in 64 slots: later words evicted earlier ones, but whatever is found is right.
	hits := 0
	for i, w := range words {
		got, _, ok := c.get(w)
		if !ok {
			continue
		}
		hits++
		if got[0] != uint32(i) || len(got) != 1+i%3 {
			t.Errorf("get(%q) = %v, the ids of another word", w, got)
		}
	}
	if hits == 0 || hits > 64 {
		t.Errorf("got %d hits after 200 puts into 64 slots, want 1..64", hits)
	}
	// ("w1-a" was used here, but that is words[1]: it hit whenever it survived eviction,
	// which depends on the cache's random hash seed.)
	for _, w := range []string{"never-put", "w1-b", "w200-", "w1"} {
		if _, _, ok := c.get(w); ok {
			t.Errorf("get(%q), a word never put, hit", w)
		}
	}
}

func TestWordHashSpreads(t *testing.T) {
	// Words that differ in one byte, at every length and position, get distinct hashes.
	seen := map[uint64]string{}
	for n := 1; n <= maxCachedWord; n++ {
		for pos := range n {
			b := make([]byte, n)
			for i := range b {
				b[i] = 'a'
			}
			b[pos] = 'b'
			w := string(b)
			h := wordHash(1, w)
			if prev, ok := seen[h]; ok {
				t.Fatalf("wordHash(%q) == wordHash(%q)", w, prev)
			}
			seen[h] = w
		}
	}
}
