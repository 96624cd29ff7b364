package router

import (
	"errors"

	"github.com/kvgate/kvgate/pkg/clientauth"
	"github.com/kvgate/kvgate/pkg/conversation"
	"github.com/kvgate/kvgate/pkg/endpoint"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// New validates cfg and returns a Router with no workers. It starts no goroutines.
func New(cfg Config) (*Router, error) {
	pl, err := pipeline.New(cfg.pipeline())
	if err != nil {
		return nil, err
	}
	pc := pl.Config()
	cfg.MaxBodyBytes, cfg.MaxN, cfg.MaxPrompts, cfg.Logger, cfg.Now = pc.MaxBodyBytes, pc.MaxN, pc.MaxPrompts, pc.Logger, pc.Now
	rt := &Router{cfg: cfg, pl: pl, fleet: pl.Fleet()}
	if rt.met, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	svc, err := responsesService(cfg)
	if err != nil {
		return nil, err
	}
	rt.api = endpoint.NewAPI(pl, svc)
	if cfg.AdminToken != "" {
		if rt.adminKeys, err = clientauth.NewKeySet([]clientauth.APIKey{{Name: "admin", Key: cfg.AdminToken}}); err != nil {
			return nil, errors.New("router: new: the admin token must be 1-4096 printable ASCII characters without spaces")
		}
	}
	return rt, nil
}

// responsesService returns cfg.Responses, or the default service over a memory store.
func responsesService(cfg Config) (*conversation.Service, error) {
	if cfg.Responses != nil {
		return cfg.Responses, nil
	}
	st, err := conversation.NewMemory(conversation.MemoryConfig{Registerer: cfg.Registerer, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	return conversation.New(conversation.Config{Store: st, Registerer: cfg.Registerer, Now: cfg.Now})
}
