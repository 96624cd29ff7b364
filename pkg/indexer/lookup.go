package indexer

import "slices"

// Source says where a worker's matched-block count came from.
type Source uint8

const (
	// SourceNone: nothing matched (Matched is 0).
	SourceNone Source = iota
	// SourceEvents: the exact index fed by the worker's KV-event stream.
	SourceEvents
	// SourceTree: the approximate token tree (worker without events, or events off).
	SourceTree
	// SourcePending: the pending overlay (routed there moments ago, not yet confirmed by events).
	SourcePending
)

// String returns "events", "tree", "pending" or "none".
func (s Source) String() string {
	switch s {
	case SourceEvents:
		return "events"
	case SourceTree:
		return "tree"
	case SourcePending:
		return "pending"
	}
	return "none"
}

// Lookup answers, for one request, how many leading blocks each candidate worker holds. It
// combines the structures of DESIGN.md §4 the way routing needs them: an event-fed worker is
// scored from the Index or, when larger, the Pending overlay (requests just routed there);
// any other worker from the approximate Tree. A worker's match is the largest over its DP ranks
// (one WorkerID each), and every score is converted to blocks of the default size, so that
// workers with different block sizes, and event-fed workers beside tree-scored ones, compete on
// one scale. A worker's block size is the one its events carry (learned by the Index), else its
// spec's, else the default.
//
// A Lookup is a plain value safe for concurrent use (its structures are); the per-request
// buffers live in a LookupScratch.
type Lookup struct {
	// Index is the exact event index (required).
	Index *Index
	// Tree and Pending are optional (nil: not consulted).
	Tree    *Tree
	Pending *Pending
	// BlockSize is the default block size, the scale of every Score (the Tree's block size).
	BlockSize int
	// EventsOff scores every worker from the Tree (--kv-index off).
	EventsOff bool
}

// LookupWorker is one candidate as the Lookup needs it.
type LookupWorker struct {
	// IDs are the worker's caches, one per DP rank (at least one).
	IDs []WorkerID
	// BlockSize is the worker spec's block size; 0: not given.
	BlockSize int
	// EventFed says the worker is scored from its KV events (else from the Tree).
	EventFed bool
}

// Score is one candidate's answer.
type Score struct {
	// Events and Pending count leading blocks of the worker's own BlockSize; Tree counts blocks
	// of the default size. They are the raw answers: Tree is filled for every worker whenever
	// the tree was asked (some candidate is tree-scored, or explaining).
	Events, Tree, Pending int
	// BlockSize is the block size the worker was scored at.
	BlockSize int
	// Matched is the score, in default-size blocks, taken from Source.
	Matched int
	Source  Source
}

// LookupScratch holds one request's buffers; reuse it across requests (it is not safe for
// concurrent use). The zero value is ready.
type LookupScratch struct {
	sets []keySet
	tree []WorkerMatch
	// treeBy is tree scattered by WorkerID (see scatter).
	treeBy []int32
	// Media, when set, is the engine's view of the next Score's request (spans.go); Score
	// clears it, so a reused scratch never scores another request with it.
	Media *MediaKeys
	extra []uint64
}

// keySet is the request's block keys at one block size and their matches, as returned and
// scattered by WorkerID (eventsBy[w] is worker w's Blocks in events, 0 when absent), so that
// combining a candidate costs O(its DP ranks), not O(matched workers).
type keySet struct {
	bs                  int
	keys                []uint64
	events              []WorkerMatch
	pending             []WorkerMatch
	eventsBy, pendingBy []int32
}

// scatter records each match's Blocks at its worker's index in by (grown to cover the IDs),
// keeping the largest when a worker appears twice, and returns by. Every entry it sets must be
// cleared with unscatter before by is used for other matches.
func scatter(by []int32, ms []WorkerMatch) []int32 {
	for _, m := range ms {
		if int(m.Worker) >= len(by) {
			by = slices.Grow(by, int(m.Worker)+1-len(by))[:int(m.Worker)+1]
		}
		by[m.Worker] = max(by[m.Worker], int32(m.Blocks))
	}
	return by
}

// unscatter clears the entries scatter set for ms.
func unscatter(by []int32, ms []WorkerMatch) {
	for _, m := range ms {
		by[m.Worker] = 0
	}
}

// Keys returns the request's block keys at block size bs from the last Score call (nil when no
// candidate was scored at bs, or the prompt has no full block). The slice is scratch-owned.
func (s *LookupScratch) Keys(bs int) []uint64 {
	if ks := s.set(bs); ks != nil {
		return ks.keys
	}
	return nil
}

func (s *LookupScratch) set(bs int) *keySet {
	for i := range s.sets {
		if s.sets[i].bs == bs {
			return &s.sets[i]
		}
	}
	return nil
}

// addSet returns an empty key set for bs, reusing the scratch's buffers.
func (s *LookupScratch) addSet(bs int) *keySet {
	if len(s.sets) < cap(s.sets) {
		s.sets = s.sets[:len(s.sets)+1]
	} else {
		s.sets = append(s.sets, keySet{})
	}
	ks := &s.sets[len(s.sets)-1]
	ks.bs = bs
	ks.keys = ks.keys[:0]
	return ks
}

// BlockSizeOf returns the block size w is scored at: learned from its events, else its spec's,
// else the default.
func (l *Lookup) BlockSizeOf(w LookupWorker) int {
	l.Index.mu.RLock()
	defer l.Index.mu.RUnlock()
	return l.blockSizeLocked(w)
}

func (l *Lookup) blockSizeLocked(w LookupWorker) int {
	for _, id := range w.IDs {
		if bs := l.Index.c.workerBlockSize(id); bs > 0 {
			return bs
		}
	}
	if w.BlockSize > 0 {
		return w.BlockSize
	}
	return l.BlockSize
}

// Score fills out[i] for ws[i] for a request's tokens, hashed under namespace ns (a LoRA
// adapter; the Tree, keyed by raw tokens without a namespace, is not consulted for one), and
// returns out (grown to len(ws) when needed). explain also asks the Tree for event-fed workers,
// for /debug/route. It allocates nothing once s and out have grown to the fleet.
func (l *Lookup) Score(s *LookupScratch, tokens []uint32, ns string, ws []LookupWorker, out []Score, explain bool) []Score {
	if cap(out) < len(ws) {
		out = make([]Score, len(ws))
	}
	out = out[:len(ws)]
	anyTree := l.blockSizes(ws, out)
	s.sets = s.sets[:0]
	for i := range ws {
		if bs := out[i].BlockSize; len(tokens) >= bs && s.set(bs) == nil {
			ks := s.addSet(bs)
			ks.keys = s.appendKeys(ks.keys, tokens, bs, ns)
		}
	}
	s.Media = nil
	for i := range s.sets {
		ks := &s.sets[i]
		ks.events, ks.pending = ks.events[:0], ks.pending[:0]
		if !l.EventsOff {
			ks.events = l.Index.Match(ks.keys, ks.events)
		}
		if l.Pending != nil {
			ks.pending = l.Pending.Match(ks.keys, ks.pending)
		}
	}
	s.tree = s.tree[:0]
	if (anyTree || explain) && l.Tree != nil && len(tokens) > 0 && ns == "" {
		s.tree = l.Tree.Match(tokens, s.tree)
	}
	l.combineAll(s, ws, out)
	return out
}

// Rescore fills out[i] for ws[i] as Score would for the request of the last Score call on s,
// from the matches that call found, without hashing or matching again, and returns out. It is
// exact for each worker whose block size that call scored (and, for a tree-scored worker, when
// it asked the Tree: Probes ensure both); any other worker scores 0 from events.
func (l *Lookup) Rescore(s *LookupScratch, ws []LookupWorker, out []Score) []Score {
	if cap(out) < len(ws) {
		out = make([]Score, len(ws))
	}
	out = out[:len(ws)]
	l.blockSizes(ws, out)
	l.combineAll(s, ws, out)
	return out
}

// combineAll scatters the matches in s, combines each of ws into out, and clears them again.
func (l *Lookup) combineAll(s *LookupScratch, ws []LookupWorker, out []Score) {
	for i := range s.sets {
		ks := &s.sets[i]
		ks.eventsBy, ks.pendingBy = scatter(ks.eventsBy, ks.events), scatter(ks.pendingBy, ks.pending)
	}
	s.treeBy = scatter(s.treeBy, s.tree)
	for i, w := range ws {
		l.combine(&out[i], w, s)
	}
	for i := range s.sets {
		ks := &s.sets[i]
		unscatter(ks.eventsBy, ks.events)
		unscatter(ks.pendingBy, ks.pending)
	}
	unscatter(s.treeBy, s.tree)
}

// Holders appends to dst every WorkerID the last Score call on s found holding at least the
// first block of its request, in the Index or the Pending overlay at any block size it scored,
// or in the Tree when it asked the Tree; each once, in increasing order. Every worker not
// listed scores 0 for that request, had it been a candidate at one of those block sizes (a
// tree-scored one: when the Tree was asked), so a caller that needs the best score over a
// large fleet can score these few instead (the admission hand-off's Fit.Elsewhere).
func (s *LookupScratch) Holders(dst []WorkerID) []WorkerID {
	start := len(dst)
	for i := range s.sets {
		for _, m := range s.sets[i].events {
			dst = append(dst, m.Worker)
		}
		for _, m := range s.sets[i].pending {
			dst = append(dst, m.Worker)
		}
	}
	for _, m := range s.tree {
		dst = append(dst, m.Worker)
	}
	slices.Sort(dst[start:])
	return append(dst[:start], slices.Compact(dst[start:])...)
}

// Probes appends to dst one worker with no IDs per way ws are scored: one event-fed worker per
// distinct block size among the event-fed, one tree-scored worker if any is. Scored beside a
// candidate, they hold nothing themselves but make Score match the request at every block size
// and in every structure ws need, so that LookupScratch.Holders then lists every worker of ws
// that holds any of it.
func (l *Lookup) Probes(ws []LookupWorker, dst []LookupWorker) []LookupWorker {
	start := len(dst)
	tree := false
	l.Index.mu.RLock()
	defer l.Index.mu.RUnlock()
	for _, w := range ws {
		if !l.fed(w) {
			tree = true
			continue
		}
		bs := l.blockSizeLocked(w)
		if !slices.ContainsFunc(dst[start:], func(p LookupWorker) bool { return p.BlockSize == bs }) {
			dst = append(dst, LookupWorker{BlockSize: bs, EventFed: true})
		}
	}
	if tree {
		dst = append(dst, LookupWorker{})
	}
	return dst
}

// blockSizes resets out and sets each worker's block size under one read lock; it reports
// whether any worker is scored from the Tree.
func (l *Lookup) blockSizes(ws []LookupWorker, out []Score) (anyTree bool) {
	l.Index.mu.RLock()
	for i, w := range ws {
		out[i] = Score{BlockSize: l.blockSizeLocked(w)}
		anyTree = anyTree || !l.fed(w)
	}
	l.Index.mu.RUnlock()
	return anyTree
}

func (l *Lookup) fed(w LookupWorker) bool { return w.EventFed && !l.EventsOff }

// combine fills sc from the request's matches for w.
func (l *Lookup) combine(sc *Score, w LookupWorker, s *LookupScratch) {
	if ks := s.set(sc.BlockSize); ks != nil {
		sc.Events = bestOf(w.IDs, ks.eventsBy)
		sc.Pending = bestOf(w.IDs, ks.pendingBy)
	}
	sc.Tree = bestOf(w.IDs, s.treeBy)
	// Events and pending count blocks of the worker's own size; the tree counts blocks of the
	// default size. Compare in default-size blocks (no division for the usual worker at the
	// default size: this runs for every candidate).
	ev, pe := sc.Events, sc.Pending
	if sc.BlockSize != l.BlockSize {
		ev, pe = ev*sc.BlockSize/l.BlockSize, pe*sc.BlockSize/l.BlockSize
	}
	switch fed := l.fed(w); {
	case fed && ev >= pe && ev > 0:
		sc.Matched, sc.Source = ev, SourceEvents
	case fed && pe > 0:
		sc.Matched, sc.Source = pe, SourcePending
	case !fed && sc.Tree > 0:
		sc.Matched, sc.Source = sc.Tree, SourceTree
	}
}

// bestOf returns the largest Blocks among ids (a worker's DP ranks) in matches scattered by
// WorkerID.
func bestOf(ids []WorkerID, by []int32) int {
	best := int32(0)
	for _, id := range ids {
		if int(id) < len(by) {
			best = max(best, by[id])
		}
	}
	return int(best)
}

// Record notes that a request was just routed to w: for an event-fed worker its block keys
// (at w's block size, as the last Score computed them: LookupScratch.Keys) go into the Pending
// overlay until w's events confirm them; any other worker's tokens go into the Tree, which is
// all the gateway will ever know of its cache. Requests in a namespace (a LoRA adapter) are not
// recorded in the Tree: it is keyed by raw tokens without a namespace, so an adapter prompt
// would match (and later be matched by) the base model's. Nil structures are skipped.
func (l *Lookup) Record(w LookupWorker, keys []uint64, tokens []uint32, ns string) {
	if len(tokens) == 0 || len(w.IDs) == 0 {
		return
	}
	if l.fed(w) {
		if l.Pending != nil && len(keys) > 0 {
			l.Pending.Add(w.IDs[0], keys)
		}
		return
	}
	if l.Tree != nil && ns == "" {
		l.Tree.Insert(w.IDs[0], tokens)
	}
}

// Forget drops what the gateway believes w caches, in every structure and DP rank, and keeps
// w known: for a worker that went down (a crashed engine comes back empty). Its event stream
// rebuilds its index entries when it reconnects.
func (l *Lookup) Forget(w LookupWorker) {
	for _, id := range w.IDs {
		l.Index.ResetWorker(id)
		l.forgetOverlays(id)
	}
}

// Remove drops w from every structure, for a worker that left the fleet; its IDs may then be
// given to another worker.
func (l *Lookup) Remove(w LookupWorker) {
	for _, id := range w.IDs {
		l.Index.RemoveWorker(id)
		l.forgetOverlays(id)
	}
}

func (l *Lookup) forgetOverlays(id WorkerID) {
	if l.Tree != nil {
		l.Tree.RemoveWorker(id)
	}
	if l.Pending != nil {
		l.Pending.RemoveWorker(id)
	}
}
