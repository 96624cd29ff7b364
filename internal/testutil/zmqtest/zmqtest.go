package zmqtest

import (
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// Socket opens a socket of type typ with linger 0 (so closing never blocks on unsent
// messages) and closes it when the test ends. Failures end the test with t.Fatal.
func Socket(t testing.TB, typ zmq.Type) *zmq.Socket {
	t.Helper()
	s, err := zmq.NewSocket(typ)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// RecvWithin receives one multipart message from s, or returns nil when none arrives within
// d. Poll and receive errors end the test with t.Fatalf.
func RecvWithin(t testing.TB, s *zmq.Socket, d time.Duration) [][]byte {
	t.Helper()
	poller := zmq.NewPoller()
	poller.Add(s, zmq.POLLIN)
	polled, err := poller.Poll(d)
	if err != nil {
		t.Fatalf("poll: %v", err)
	}
	if len(polled) == 0 {
		return nil
	}
	msg, err := s.RecvMessageBytes(0)
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	return msg
}
