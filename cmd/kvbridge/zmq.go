package main

import (
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/kvbridge"
)

// zmqOptions are the ZMQ flags shared by tail and serve.
type zmqOptions struct {
	endpoint, replay, topic string
	dpSize                  int
}

// newZMQSource builds the ZMQ subscriber for o (every DP rank, replay from 0 on connect when a
// replay endpoint is given) delivering into c, and a func that releases it after Run has
// returned. The source opens its sockets in Run and closes them before Run returns, so the
// release func has nothing to do today; it keeps the call sites honest if that changes.
func newZMQSource(o zmqOptions, c kvbridge.Consumer, log *zap.Logger) (runner, func(), error) {
	src, err := kvbridge.NewZMQSource(kvbridge.ZMQConfig{
		Worker:   o.endpoint,
		Endpoint: o.endpoint,
		Replay:   o.replay,
		Topic:    o.topic,
		DPSize:   o.dpSize,
	}, c, log, nil)
	if err != nil {
		return nil, nil, err
	}
	return src, func() {}, nil
}
