package main

import (
	"errors"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/kvbridge"
)

// zmqOptions are the ZMQ flags shared by tail and serve.
type zmqOptions struct {
	endpoint, replay, topic string
	dpSize                  int
}

// newZMQSource builds the ZMQ subscriber for o delivering into c, and a func that releases it
// after Run has returned.
//
// TODO(kvbridge): wire kvbridge.NewZMQSource once pkg/kvbridge/zmq_source.go lands; until then
// the ZMQ paths report that they are unavailable.
func newZMQSource(o zmqOptions, c kvbridge.Consumer, log *zap.Logger) (runner, func(), error) {
	return nil, func() {}, errors.New("ZMQ source not built into this binary yet")
}
