package kvbridge

import (
	"syscall"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// pushPull returns a connected PUSH → PULL pair over inproc, closed when the test ends (after
// any watch the test closes itself).
func pushPull(t *testing.T, name string) (push, pull *zmq.Socket) {
	t.Helper()
	var err error
	if pull, err = zmq.NewSocket(zmq.PULL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pull.Close() })
	if err := pull.Bind("inproc://" + name); err != nil {
		t.Fatal(err)
	}
	if push, err = zmq.NewSocket(zmq.PUSH); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { push.Close() })
	if err := push.Connect("inproc://" + name); err != nil {
		t.Fatal(err)
	}
	return push, pull
}

// drain receives from s until EAGAIN, which resets its ZMQ_FD edge, and returns the count.
func drain(t *testing.T, s *zmq.Socket) int {
	t.Helper()
	for n := 0; ; n++ {
		if _, err := s.RecvBytes(zmq.DONTWAIT); err != nil {
			if zmq.AsErrno(err) != zmq.Errno(syscall.EAGAIN) {
				t.Fatalf("recv: %v", err)
			}
			return n
		}
	}
}

func waitReady(t *testing.T, w *fdWatch, within time.Duration) bool {
	t.Helper()
	select {
	case <-w.readyChan():
		return true
	case <-time.After(within):
		return false
	}
}

// TestFDWatchSignalsEachEdge: a watched socket signals ready for a message sent after it was
// drained, on every round, and not while nothing arrives; two watches sharing the poller get
// only their own socket's edges.
func TestFDWatchSignalsEachEdge(t *testing.T) {
	pushA, pullA := pushPull(t, "fdwatch-a")
	pushB, pullB := pushPull(t, "fdwatch-b")
	a, err := watchSocket(pullA)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := watchSocket(pullB)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	for _, w := range []*fdWatch{a, b} {
		if !waitReady(t, w, time.Second) {
			t.Fatal("a new watch did not signal ready at once")
		}
	}
	drain(t, pullA)
	drain(t, pullB)
	for round := range 20 {
		if _, err := pushA.SendBytes([]byte{byte(round)}, 0); err != nil {
			t.Fatal(err)
		}
		if !waitReady(t, a, defaultTestTimeout) {
			t.Fatalf("round %d: no ready after a message", round)
		}
		// The edge may come before the message is readable (libzmq's command, then its pipe):
		// receive until it has arrived, as a reader draining on each edge would.
		got := 0
		for deadline := time.Now().Add(defaultTestTimeout); got == 0 && time.Now().Before(deadline); {
			if got = drain(t, pullA); got == 0 {
				waitReady(t, a, 50*time.Millisecond)
			}
		}
		if got != 1 {
			t.Fatalf("round %d: drained %d messages, want 1", round, got)
		}
	}
	if waitReady(t, b, 3*zmqWakeBatch) {
		drain(t, pullB)
		if waitReady(t, b, 3*zmqWakeBatch) {
			t.Fatal("a quiet socket's watch kept signalling ready for another socket's messages")
		}
	}
	if _, err := pushB.SendBytes([]byte("b"), 0); err != nil {
		t.Fatal(err)
	}
	if !waitReady(t, b, defaultTestTimeout) {
		t.Fatal("the second watch got no ready for its own message")
	}
}

// TestFDPollerRunsWhileWatched: the first watch starts the process's poller, every watch shares
// it, and the last close stops it (its goroutine and descriptors); the next watch starts a new
// one that works.
func TestFDPollerRunsWhileWatched(t *testing.T) {
	pollerNow := func() *fdPoller {
		pollers.mu.Lock()
		defer pollers.mu.Unlock()
		return pollers.p
	}
	if p := pollerNow(); p != nil {
		t.Fatalf("a poller runs with no watch open (%d users)", p.users)
	}
	push, pull := pushPull(t, "fdpoller-life")
	_, pull2 := pushPull(t, "fdpoller-life2")
	a, err := watchSocket(pull)
	if err != nil {
		t.Fatal(err)
	}
	b, err := watchSocket(pull2)
	if err != nil {
		t.Fatal(err)
	}
	if a.p != b.p || pollerNow() != a.p {
		t.Fatal("two watches do not share the process's poller")
	}
	a.close()
	if pollerNow() != b.p {
		t.Fatal("the poller stopped while a watch was still open")
	}
	b.close()
	if p := pollerNow(); p != nil {
		t.Fatal("the poller still runs after its last watch closed")
	}
	c, err := watchSocket(pull)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if c.p == a.p {
		t.Fatal("a watch after the poller stopped joined the stopped poller")
	}
	waitReady(t, c, time.Second)
	drain(t, pull)
	if _, err := push.SendBytes([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if !waitReady(t, c, defaultTestTimeout) {
		t.Fatal("a restarted poller signalled no ready")
	}
}
