package router

import (
	"net/http"
	"sort"

	"github.com/kvgate/kvgate/pkg/pipeline"
)

// modelList is the GET /v1/models body.
type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Parent  string `json:"parent,omitempty"` // the base model of a LoRA adapter, as vLLM lists it
}

// handleModels lists every model the gateway serves: each configured model (with or without a
// worker up), the names the default pool's workers serve, and the LoRA adapters any worker
// lists.
func (rt *Router) handleModels(w http.ResponseWriter, _ *http.Request) {
	s := rt.fleet.Snapshot()
	def := s.DefaultModel()
	seen := map[string]bool{}
	list := modelList{Object: "list", Data: []modelCard{}}
	card := func(name string) {
		if name == "" || seen[name] {
			return
		}
		seen[name] = true
		list.Data = append(list.Data, modelCard{ID: name, Object: "model", Created: rt.cfg.Now().Unix(), OwnedBy: "kvgate"})
	}
	for _, p := range s.Pools()[1:] {
		card(p.Name())
	}
	for _, m := range s.Members() {
		if m.Pool().Default() {
			card(m.Worker().ServedModel(def))
		}
	}
	// LoRA adapters the workers list are served under their own names (DESIGN.md §3).
	for _, m := range s.Members() {
		parent := m.Worker().ServedModel(def)
		if !m.Pool().Default() {
			parent = m.Pool().Name()
		}
		for _, a := range m.Worker().Adapters() {
			if seen[a] {
				continue
			}
			seen[a] = true
			list.Data = append(list.Data, modelCard{ID: a, Object: "model", Created: rt.cfg.Now().Unix(), OwnedBy: "kvgate", Parent: parent})
		}
	}
	sort.Slice(list.Data, func(i, j int) bool { return list.Data[i].ID < list.Data[j].ID })
	pipeline.WriteJSON(w, http.StatusOK, list)
}
