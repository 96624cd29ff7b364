package admission

import "time"

// Ticket states.
const (
	stateWaiting = iota
	stateGranted
	stateCancelled
	stateFailed
)

// Ticket is one waiting request's place in the queue. Its fields are guarded by the queue's
// mutex until ready is closed; after that worker and err are read-only.
type Ticket[W any] struct {
	req   Request[W]
	seq   uint64    // arrival order, the tie-break of equal start tags
	enq   time.Time // when it entered the queue
	start int64     // SFQ start tag in its band's virtual time
	band  *band[W]
	idx   int // position in band.heap; -1 when not in it
	skips int // times passed over for a later request's cached prefix (Config.MaxSkips)

	prev, next *Ticket[W] // the queue's age list

	state  int
	worker W     // the grant
	fit    Fit   // how well the granted worker suited it (Fit)
	err    error // set instead of a grant (Close)
	ready  chan struct{}
}

// Granted reports whether the ticket was granted a worker. Call it after Wait returns.
func (t *Ticket[W]) Granted() bool { return t.ready != nil && isClosed(t.ready) && t.err == nil }

// Fit returns how well the worker it was granted suited the request when Next chose it, as
// its Score reported (the zero Fit before a grant, and OK alone for a request without Score).
// Read it after Wait returns, or from the goroutine that called Next.
func (t *Ticket[W]) Fit() Fit { return t.fit }

// Enqueued returns when the request entered the queue.
func (t *Ticket[W]) Enqueued() time.Time { return t.enq }

// Priority returns the request's band.
func (t *Ticket[W]) Priority() int { return t.req.Priority }

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// ageList is an intrusive doubly linked list of tickets by arrival, for the age bound.
type ageList[W any] struct {
	head, tail *Ticket[W]
	n          int
}

func (l *ageList[W]) pushBack(t *Ticket[W]) {
	t.prev, t.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = t
	} else {
		l.head = t
	}
	l.tail = t
	l.n++
}

func (l *ageList[W]) remove(t *Ticket[W]) {
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		l.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		l.tail = t.prev
	}
	t.prev, t.next = nil, nil
	l.n--
}
