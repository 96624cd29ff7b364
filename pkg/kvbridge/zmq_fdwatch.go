package kvbridge

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// fdWatch waits for a ZMQ socket's ZMQ_FD and signals ready, so a stream that waits costs
// nothing but an entry in the process's fdPoller: no goroutine blocked on it, no OS thread,
// and no wake-up while it is idle.
//
// ZMQ_FD is edge-triggered: it becomes readable when libzmq queues a command for the socket
// (e.g. "a pipe has messages"), and is reset when the socket processes its commands, which a
// receive that returns EAGAIN does. So whoever receives ready must drain the socket until EAGAIN
// before waiting again; a command queued after that makes a new edge, which epoll keeps until
// the poller next waits, so no wake-up is lost between a drain and a wait.
//
// The watch holds a duplicate of libzmq's descriptor (libzmq owns and closes its own), and only
// waits on it, never reads it: reading would steal libzmq's signal.
type fdWatch struct {
	fd int // the duplicate
	id uint64
	p  *fdPoller
	// ready has capacity 1: wake-ups that arrive while one is pending merge into it.
	ready chan struct{}
}

// zmqWakeBatch is how long the poller pauses after each wake-up before it waits again, so that
// the batches arriving on many streams meanwhile are handed over in one wake-up of the
// process, not one each. A batch waits at most this long beyond its arrival (the first after
// a quiet spell not at all), against the tens of milliseconds an engine's step takes. On a
// virtual machine where a thread's sleep and wake-up cost microseconds of hypervisor time,
// the wake-ups were a large share of a gateway's CPU at hundreds of streams (docs/scaling.md).
const zmqWakeBatch = 5 * time.Millisecond

// fdPoller waits for every fdWatch of the process in one epoll instance, on one goroutine
// (one OS thread blocked in epoll_wait while nothing is ready). It runs while any watch is
// open: the first watch starts it and the last one's close stops it.
type fdPoller struct {
	epfd  int
	stop  [2]int // a pipe; a byte written to stop[1] ends run
	users int    // open watches; guarded by pollers.mu
	mu    sync.Mutex
	// watches maps a watch's id to it; id 0 is the stop pipe.
	watches map[uint64]*fdWatch
	nextID  uint64
}

var pollers struct {
	mu sync.Mutex
	p  *fdPoller
}

// acquirePoller returns the running poller, starting one if none runs, and counts a user.
func acquirePoller() (*fdPoller, error) {
	pollers.mu.Lock()
	defer pollers.mu.Unlock()
	if p := pollers.p; p != nil {
		p.users++
		return p, nil
	}
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("kvbridge: epoll_create1: %w", err)
	}
	p := &fdPoller{epfd: epfd, users: 1, watches: make(map[uint64]*fdWatch)}
	if err := syscall.Pipe2(p.stop[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("kvbridge: pipe2: %w", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p.stop[0], &ev); err != nil {
		p.closeFDs()
		return nil, fmt.Errorf("kvbridge: epoll_ctl: %w", err)
	}
	pollers.p = p
	go p.run()
	return p, nil
}

// release drops a user; the last one stops the poller (run closes its descriptors).
func (p *fdPoller) release() {
	pollers.mu.Lock()
	defer pollers.mu.Unlock()
	if p.users--; p.users > 0 {
		return
	}
	if pollers.p == p {
		pollers.p = nil
	}
	_, _ = syscall.Write(p.stop[1], []byte{0})
}

func (p *fdPoller) closeFDs() {
	syscall.Close(p.stop[0])
	syscall.Close(p.stop[1])
	syscall.Close(p.epfd)
}

// run hands each readiness edge to its watch until stopped. The event's data is the watch's
// id, not its descriptor, so an edge reported just before a watch closed can never reach a
// later watch that got the same descriptor number; one for a closed watch finds nothing and
// is dropped.
func (p *fdPoller) run() {
	defer p.closeFDs()
	events := make([]syscall.EpollEvent, 512)
	for {
		n, err := syscall.EpollWait(p.epfd, events, -1)
		if err != nil {
			if !errors.Is(err, syscall.EINTR) {
				time.Sleep(zmqWakeBatch) // not expected; do not spin on it
			}
			continue
		}
		p.mu.Lock()
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if id == 0 {
				p.mu.Unlock()
				return
			}
			if w := p.watches[id]; w != nil {
				select {
				case w.ready <- struct{}{}:
				default:
				}
			}
		}
		p.mu.Unlock()
		if n < len(events) {
			time.Sleep(zmqWakeBatch)
		}
	}
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
	p, err := acquirePoller()
	if err != nil {
		syscall.Close(dup)
		return nil, err
	}
	w := &fdWatch{fd: dup, p: p, ready: make(chan struct{}, 1)}
	w.ready <- struct{}{}
	p.mu.Lock()
	p.nextID++
	w.id = p.nextID
	p.watches[w.id] = w
	p.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | -syscall.EPOLLET, Fd: int32(uint32(w.id)), Pad: int32(uint32(w.id >> 32))}
	if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, dup, &ev); err != nil {
		w.close()
		return nil, fmt.Errorf("kvbridge: ZMQ_FD is not pollable: %w", err)
	}
	return w, nil
}

// close stops the watch and releases the duplicate descriptor; nil is a no-op.
func (w *fdWatch) close() {
	if w == nil {
		return
	}
	w.p.mu.Lock()
	delete(w.p.watches, w.id)
	w.p.mu.Unlock()
	// epoll forgets a registration only when every descriptor of its file is closed, and
	// libzmq's own stays open until the socket closes: so it is removed explicitly.
	_ = syscall.EpollCtl(w.p.epfd, syscall.EPOLL_CTL_DEL, w.fd, nil)
	syscall.Close(w.fd)
	w.p.release()
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
