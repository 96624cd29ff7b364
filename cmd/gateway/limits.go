package main

import (
	"syscall"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/kvbridge"
)

// maxZMQSockets caps the libzmq socket table (a pointer per slot): 64K sockets serve 16K
// event-fed workers.
const maxZMQSockets = 1 << 16

// raiseZMQSocketLimit lifts libzmq's default limit of 1023 sockets, which would stop the
// gateway at about 250 event-fed workers, to what the open-file limit allows (each socket
// holds a descriptor; Go raises the soft limit to the hard one at start). It must run before
// the first event source is built.
func raiseZMQSocketLimit(log *zap.Logger) {
	n := maxZMQSockets
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < uint64(n) {
		n = int(rl.Cur)
	}
	if err := kvbridge.SetSocketLimit(n); err != nil {
		log.Warn("could not raise the ZMQ socket limit; large fleets may fail to subscribe", zap.Error(err))
	}
}
