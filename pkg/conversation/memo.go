package conversation

import (
	"runtime"
	"sync"
	"weak"

	"github.com/kvgate/kvgate/pkg/openai"
)

// itemMemo keeps the parse of stored records' items (Input then Output) for as long as the
// record itself lives. A chain's records are continued by every later turn, and the stores
// hand out the same *Record each time (Memory, and Redis for the records a replica holds), so
// a chain of n turns is parsed once instead of on each of its follow-ups. Records are never
// modified once stored, so the parse stays true; it is keyed by a weak pointer, so it does
// not keep a record the store dropped (the entry goes when the record is collected). Safe
// for concurrent use.
type itemMemo struct {
	mu sync.Mutex
	m  map[weak.Pointer[Record]][]openai.Item
}

func newItemMemo() *itemMemo { return &itemMemo{m: map[weak.Pointer[Record]][]openai.Item{}} }

// items returns r's items, shared by every turn that reads r: read-only (an append by a
// caller copies, the slice has no spare capacity).
func (im *itemMemo) items(r *Record) ([]openai.Item, *openai.Error) {
	k := weak.Make(r)
	im.mu.Lock()
	memo, ok := im.m[k]
	im.mu.Unlock()
	if ok {
		return memo, nil
	}
	var items []openai.Item
	for _, raw := range [][]byte{r.Input, r.Output} {
		its, aerr := openai.ParseItems(raw, "stored", 1<<30)
		if aerr != nil {
			return nil, aerr
		}
		items = append(items, its...)
	}
	items = items[:len(items):len(items)]
	im.mu.Lock()
	defer im.mu.Unlock()
	if _, ok := im.m[k]; !ok {
		im.m[k] = items
		runtime.AddCleanup(r, im.forget, k)
	}
	return items, nil
}

func (im *itemMemo) forget(k weak.Pointer[Record]) {
	im.mu.Lock()
	defer im.mu.Unlock()
	delete(im.m, k)
}

// len is the number of records whose parse is kept.
func (im *itemMemo) len() int {
	im.mu.Lock()
	defer im.mu.Unlock()
	return len(im.m)
}
