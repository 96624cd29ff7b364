package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/pkg/conversation"
)

// responsesOptions configure the Responses API's store (docs/responses.md).
type responsesOptions struct {
	// ResponsesStore is "memory" (one replica; lost on restart) or redis://HOST:PORT/DB
	// (shared by replicas; rediss:// for TLS).
	ResponsesStore        string        `yaml:"responses_store"`
	ResponsesMaxBytes     int           `yaml:"responses_max_bytes"`
	ResponsesTTL          time.Duration `yaml:"responses_ttl"`
	ResponsesMaxChain     int           `yaml:"responses_max_chain"`
	ResponsesStoreTimeout time.Duration `yaml:"responses_store_timeout"`
}

func defaultResponsesOptions() responsesOptions {
	return responsesOptions{ResponsesStore: "memory", ResponsesMaxBytes: conversation.DefaultMaxBytes, ResponsesTTL: conversation.DefaultTTL,
		ResponsesMaxChain: conversation.DefaultMaxChain, ResponsesStoreTimeout: time.Second}
}

func (o *responsesOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.ResponsesStore, "responses-store", o.ResponsesStore, "where /v1/responses and /v1/conversations state lives: memory (this replica only, lost on restart) or redis://HOST:PORT/DB (shared by every replica)")
	fs.IntVar(&o.ResponsesMaxBytes, "responses-max-bytes", o.ResponsesMaxBytes, "memory store: bytes of responses and conversations kept, least recently used dropped first (with redis: set Redis's maxmemory)")
	fs.DurationVar(&o.ResponsesTTL, "responses-ttl", o.ResponsesTTL, "a stored response or conversation nobody reads or continues for this long is dropped (each follow-up renews its chain)")
	fs.IntVar(&o.ResponsesMaxChain, "responses-max-chain", o.ResponsesMaxChain, "most responses one previous_response_id chain may hold; a longer chain is a 400")
	fs.DurationVar(&o.ResponsesStoreTimeout, "responses-store-timeout", o.ResponsesStoreTimeout, "redis store: bound on each operation (past it the turn is a 503)")
}

func (o *responsesOptions) validate() error {
	switch {
	case o.ResponsesMaxBytes < 0 || o.ResponsesTTL < 0 || o.ResponsesMaxChain < 0 || o.ResponsesStoreTimeout < 0:
		return errors.New("gateway: --responses-max-bytes, --responses-ttl, --responses-max-chain and --responses-store-timeout must not be negative")
	case o.ResponsesStore == "memory":
		return nil
	case strings.HasPrefix(o.ResponsesStore, "redis://") || strings.HasPrefix(o.ResponsesStore, "rediss://"):
		if _, err := conversation.NewRedis(conversation.RedisConfig{URL: o.ResponsesStore}); err != nil {
			return fmt.Errorf("gateway: --responses-store: %w", errors.Unwrap(err))
		}
		return nil
	}
	return errors.New("gateway: --responses-store must be memory or redis://HOST:PORT/DB")
}

// storeName is the store for logs: "memory", or the Redis URL without its password.
func (o *responsesOptions) storeName() string {
	u, err := url.Parse(o.ResponsesStore)
	if err != nil || u.Scheme == "" {
		return o.ResponsesStore
	}
	u.User = nil
	return u.String()
}

// buildResponses returns the Responses service of o and a function releasing its store.
func (o *responsesOptions) buildResponses(reg prometheus.Registerer) (*conversation.Service, func(), error) {
	var st conversation.Store
	closeStore := func() {}
	if o.ResponsesStore == "memory" {
		m, err := conversation.NewMemory(conversation.MemoryConfig{MaxBytes: o.ResponsesMaxBytes, TTL: o.ResponsesTTL, Registerer: reg})
		if err != nil {
			return nil, nil, err
		}
		st = m
	} else {
		r, err := conversation.NewRedis(conversation.RedisConfig{URL: o.ResponsesStore, TTL: o.ResponsesTTL, Timeout: o.ResponsesStoreTimeout, Registerer: reg})
		if err != nil {
			return nil, nil, err
		}
		st, closeStore = r, func() { _ = r.Close() }
	}
	svc, err := conversation.New(conversation.Config{Store: st, MaxChain: o.ResponsesMaxChain, Registerer: reg})
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	return svc, closeStore, nil
}
