package admission

import "container/heap"

// band is one priority band: its tickets in a min-heap by (start tag, arrival), and each
// key's SFQ state. Not safe for concurrent use: the queue's mutex guards it.
type band[W any] struct {
	prio  int
	vtime int64 // the start tag of the last ticket served
	heap  ticketHeap[W]
	keys  map[string]*keyState
}

// keyState is one client key's fairness state in a band.
type keyState struct {
	finish  int64 // finish tag of the key's last queued ticket
	waiting int
}

func newBand[W any](prio int) *band[W] {
	return &band[W]{prio: prio, keys: map[string]*keyState{}}
}

func (b *band[W]) len() int { return len(b.heap) }

// push tags t (start = max(virtual time, the key's last finish); finish = start + cost) and
// adds it.
func (b *band[W]) push(t *Ticket[W]) {
	ks := b.keys[t.req.Key]
	if ks == nil {
		ks = &keyState{}
		b.keys[t.req.Key] = ks
	}
	t.start = max(b.vtime, ks.finish)
	ks.finish = t.start + t.req.Cost
	ks.waiting++
	t.band = b
	heap.Push(&b.heap, t)
}

// remove takes t out; served advances the virtual time to its start tag. A key with nothing
// waiting whose finish the virtual time has passed is forgotten (it would start at the
// virtual time anyway), so the map holds only keys that matter.
func (b *band[W]) remove(t *Ticket[W], served bool) {
	heap.Remove(&b.heap, t.idx)
	ks := b.keys[t.req.Key]
	ks.waiting--
	if served {
		b.vtime = max(b.vtime, t.start)
	} else if ks.finish == t.start+t.req.Cost {
		// The key's last request left unserved: it is not charged for it.
		ks.finish = t.start
	}
	if ks.waiting == 0 && ks.finish <= b.vtime {
		delete(b.keys, t.req.Key)
	}
}

// firstN appends the band's first n tickets in service order to dst. It pops and pushes them
// back: O(n log len) under the queue's lock, with n ≤ MaxLookAhead.
func (b *band[W]) firstN(dst []*Ticket[W], n int) []*Ticket[W] {
	from := len(dst)
	for len(dst)-from < n && len(b.heap) > 0 {
		dst = append(dst, heap.Pop(&b.heap).(*Ticket[W]))
	}
	for _, t := range dst[from:] {
		heap.Push(&b.heap, t)
	}
	return dst
}

// ticketHeap orders tickets by start tag, then arrival (container/heap).
type ticketHeap[W any] []*Ticket[W]

func (h ticketHeap[W]) Len() int { return len(h) }
func (h ticketHeap[W]) Less(i, j int) bool {
	if h[i].start != h[j].start {
		return h[i].start < h[j].start
	}
	return h[i].seq < h[j].seq
}
func (h ticketHeap[W]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *ticketHeap[W]) Push(x any) {
	t := x.(*Ticket[W])
	t.idx = len(*h)
	*h = append(*h, t)
}
func (h *ticketHeap[W]) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.idx = -1
	return t
}

var _ heap.Interface = (*ticketHeap[int])(nil)
