package kvbridge

import (
	"fmt"

	zmq "github.com/pebbe/zmq4"
)

// SocketsPerRank is how many ZMQ sockets one subscribed DP rank uses: the SUB, its monitor
// PAIR and libzmq's end of it, and the replay DEALER.
const SocketsPerRank = 4

// SetSocketLimit raises the process's libzmq socket limit (ZMQ_MAX_SOCKETS, 1023 by default)
// to at least n. The default stops a gateway at about 250 event-fed workers (SocketsPerRank
// each) and a publisher process at 1023 engines. libzmq sizes its socket table when the first
// socket is created, so call it before building any Source, collector or Publisher; it never
// lowers the limit. Each socket also holds a file descriptor (its mailbox), so the process's
// open-file limit must allow as many (docs/scaling.md).
func SetSocketLimit(n int) error {
	cur, err := zmq.GetMaxSockets()
	if err != nil {
		return fmt.Errorf("kvbridge: socket limit: %w", err)
	}
	if n <= cur {
		return nil
	}
	if err := zmq.SetMaxSockets(n); err != nil {
		return fmt.Errorf("kvbridge: socket limit %d: %w", n, err)
	}
	return nil
}
