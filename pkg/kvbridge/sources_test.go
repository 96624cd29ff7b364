package kvbridge

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	kvtest "github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/worker"
)

// stateLog is a SourceOptions.OnState that records the states it is told of and, for each,
// whether the source's State already returned it when the callback ran (it must not: the
// callback comes first).
type stateLog struct {
	mu     sync.Mutex
	src    Source // set once the source is built; nil before
	states []StreamState
	early  []StreamState // states State returned before the callback for them ran
}

func (l *stateLog) onState(st StreamState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := StreamConnecting // what a source reports before it is told of anything
	if len(l.states) > 0 {
		prev = l.states[len(l.states)-1]
	}
	if l.src != nil && l.src.State() == st && st != prev {
		l.early = append(l.early, st)
	}
	l.states = append(l.states, st)
}

func (l *stateLog) setSource(s Source) {
	l.mu.Lock()
	l.src = s
	l.mu.Unlock()
}

func (l *stateLog) get() (states, early []StreamState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]StreamState(nil), l.states...), append([]StreamState(nil), l.early...)
}

func (l *stateLog) last() StreamState {
	st, _ := l.get()
	if len(st) == 0 {
		return -1
	}
	return st[len(st)-1]
}

// checkStates fails the test unless the log's last state is src's and is want, and every
// state was told before State returned it.
func checkStates(t *testing.T, l *stateLog, src Source, want StreamState) {
	t.Helper()
	states, early := l.get()
	if got := l.last(); got != want || src.State() != want {
		t.Errorf("last state told: %v, State: %v, want both %v (all told: %v)", got, src.State(), want, states)
	}
	if len(early) != 0 {
		t.Errorf("states State returned before OnState was told of them: %v (all told: %v)", early, states)
	}
}

func TestSourceOnStateZMQ(t *testing.T) {
	port := freePorts(t, 1)
	startPublisher(t, PublisherConfig{Endpoint: tcpEP(port), Mode: PubBind, History: 1})
	log := &stateLog{}
	src, err := NewSource(worker.Spec{URL: "http://127.0.0.1:1", KVEvents: tcpEP(port)}, newChanConsumer(), SourceOptions{OnState: log.onState})
	if err != nil {
		t.Fatal(err)
	}
	log.setSource(src)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	kvtest.WaitFor(t, "source up", func() bool { return src.State() == StreamUp })
	checkStates(t, log, src, StreamUp)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("Run did not return after cancel")
	}
	checkStates(t, log, src, StreamStopped)
	if states, _ := log.get(); states[0] != StreamConnecting {
		t.Errorf("first state told: got %v, want connecting (all: %v)", states[0], states)
	}
}

func TestSourceOnStateGRPCSelf(t *testing.T) {
	spec := worker.Spec{URL: "grpc://127.0.0.1:1", Runtime: worker.RuntimeVLLM}
	t.Run("unimplemented", func(t *testing.T) {
		conn := startGRPCServer(t, func(grpc.ServiceRegistrar) {}) // no engine service: UNIMPLEMENTED
		log := &stateLog{}
		src, err := NewSource(spec, newChanConsumer(), SourceOptions{OnState: log.onState,
			Self: func(context.Context) (grpc.ClientConnInterface, worker.Runtime, error) {
				return conn, worker.RuntimeVLLM, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		log.setSource(src)
		if err := src.Run(context.Background()); !errors.Is(err, ErrUnimplemented) {
			t.Fatalf("Run: got %v, want ErrUnimplemented", err)
		}
		checkStates(t, log, src, StreamUnavailable)
	})
	t.Run("connection failed", func(t *testing.T) {
		log := &stateLog{}
		src, err := NewSource(spec, newChanConsumer(), SourceOptions{OnState: log.onState,
			Self: func(context.Context) (grpc.ClientConnInterface, worker.Runtime, error) {
				return nil, "", errors.New("no runtime")
			}})
		if err != nil {
			t.Fatal(err)
		}
		log.setSource(src)
		if err := src.Run(context.Background()); err == nil {
			t.Fatal("Run: got nil error, want the connection's")
		}
		checkStates(t, log, src, StreamDown)
	})
}
