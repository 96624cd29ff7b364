package kvbridge

import (
	"fmt"
	"os"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// fdWatch waits for a ZMQ socket's ZMQ_FD in Go's netpoller and signals ready, so a stream that
// waits costs a parked goroutine instead of an OS thread blocked in zmq_poll, and an idle stream
// costs no wake-ups at all.
//
// ZMQ_FD is edge-triggered: it becomes readable when libzmq queues a command for the socket
// (e.g. "a pipe has messages"), and is reset when the socket processes its commands, which a
// receive that returns EAGAIN does. So whoever receives ready must drain the socket until EAGAIN
// before waiting again; a command queued after that makes a new edge, which the netpoller keeps
// until the watch goroutine next waits, so no wake-up is lost between a drain and a wait.
//
// The watch holds a duplicate of libzmq's descriptor (libzmq owns and closes its own), and only
// waits on it, never reads it: reading would steal libzmq's signal. Nothing may call f.Fd():
// it would make the descriptor blocking, and the flag is shared with libzmq's.
type fdWatch struct {
	f *os.File
	// ready has capacity 1: wake-ups that arrive while one is pending merge into it.
	ready chan struct{}
	done  chan struct{}
}

// watchSocket starts watching s. The first ready is sent at once, so the owner drains whatever
// arrived before the watch began. close must be called before s is closed.
func watchSocket(s *zmq.Socket) (*fdWatch, error) {
	fd, err := s.GetFd()
	if err != nil {
		return nil, fmt.Errorf("kvbridge: ZMQ_FD: %w", err)
	}
	dup, err := dupCloexec(fd)
	if err != nil {
		return nil, fmt.Errorf("kvbridge: dup ZMQ_FD: %w", err)
	}
	// libzmq already made it non-blocking (the flag is shared with the duplicate); os.NewFile
	// registers a non-blocking descriptor with the netpoller.
	if err := syscall.SetNonblock(dup, true); err != nil {
		syscall.Close(dup)
		return nil, fmt.Errorf("kvbridge: ZMQ_FD non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(dup), "zmq-fd")
	// A descriptor the netpoller refused (no epoll support) has no deadlines; waiting on it
	// would block a thread, which is what this type exists to avoid.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("kvbridge: ZMQ_FD is not pollable: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("kvbridge: ZMQ_FD: %w", err)
	}
	w := &fdWatch{f: f, ready: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		// One Read for the watch's life: the callback runs after every readiness edge and
		// never consumes the descriptor; only close ends the Read. (A Read per wait would
		// reset the netpoller's pending edge each time and could lose one.)
		_ = rc.Read(func(uintptr) bool {
			select {
			case w.ready <- struct{}{}:
			default:
			}
			return false
		})
	}()
	return w, nil
}

// close stops the watch and releases the duplicate descriptor; nil is a no-op.
func (w *fdWatch) close() {
	if w == nil {
		return
	}
	w.f.Close()
	<-w.done
}

// readyChan is w's ready channel, or nil (never ready) for a nil watch.
func (w *fdWatch) readyChan() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.ready
}

// dupCloexec duplicates fd with close-on-exec set, so a child process never inherits it.
func dupCloexec(fd int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}
