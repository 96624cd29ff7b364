package kvbridge

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/zmqtest"
	"github.com/kvgate/kvgate/pkg/indexer"
)

// defaultTestTimeout bounds every wait in the ZMQ component tests.
const defaultTestTimeout = 10 * time.Second

// freePorts returns a base port p such that p..p+n-1 were free on 127.0.0.1 a moment ago.
func freePorts(t testing.TB, n int) int { return testutil.FreePortBlock(t, n) }

func tcpEP(port int) string { return fmt.Sprintf("tcp://127.0.0.1:%d", port) }

// startPublisher creates a Publisher, runs it until the test ends and closes it.
func startPublisher(t testing.TB, cfg PublisherConfig) *Publisher {
	t.Helper()
	p, err := NewPublisher(cfg)
	// A publisher restarted on the ports of one just closed may find them still bound: libzmq
	// closes its sockets on its own I/O thread, after Close returns. A new process would wait
	// the same way.
	for deadline := time.Now().Add(5 * time.Second); err != nil && strings.Contains(err.Error(), "address already in use") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		p, err = NewPublisher(cfg)
	}
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	runUntilCleanup(t, "publisher", p.Run, func() {
		if err := p.Close(); err != nil {
			t.Errorf("publisher Close: %v", err)
		}
	})
	return p
}

// runUntilCleanup runs run(ctx) on its own goroutine until the test ends; an error from it
// fails the test as "<name> Run: <err>". The test's cleanup cancels ctx, waits for run to
// return and then calls after (which may be nil), so after sees the stopped component.
func runUntilCleanup(t testing.TB, name string, run func(context.Context) error, after func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := run(ctx); err != nil {
			t.Errorf("%s Run: %v", name, err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if after != nil {
			after()
		}
	})
}

// mustRecv receives one message within defaultTestTimeout.
func mustRecv(t testing.TB, s *zmq.Socket) [][]byte {
	t.Helper()
	msg := zmqtest.RecvWithin(t, s, defaultTestTimeout)
	if msg == nil {
		t.Fatal("no message within the test timeout")
	}
	return msg
}

// storedBatch builds a one-event batch storing a single block with hash h.
func storedBatch(h uint64, parent uint64) *indexer.Batch {
	return &indexer.Batch{Timestamp: 1, Events: []indexer.Event{{
		Kind: indexer.EventStored, Hashes: []uint64{h}, Parent: parent, HasParent: parent != 0,
		Tokens: []uint32{1, 2, 3, 4}, BlockSize: 4, Medium: "GPU"}}}
}

// syncSub works around ZMQ's slow joiner: it publishes until sub receives one of the batches,
// then drains sub up to the last published one. It returns the last published seq.
func syncSub(t testing.TB, p *Publisher, sub *zmq.Socket) uint64 {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	var last uint64
	for time.Now().Before(deadline) {
		seq, err := p.Publish(storedBatch(999, 0))
		if err != nil {
			t.Fatal(err)
		}
		last = seq
		if msg := zmqtest.RecvWithin(t, sub, 20*time.Millisecond); msg != nil {
			for {
				m, err := ParseLive(msg)
				if err != nil {
					t.Fatal(err)
				}
				if m.Seq == last {
					return last
				}
				msg = mustRecv(t, sub)
			}
		}
	}
	t.Fatal("subscriber never received a batch")
	return 0
}
