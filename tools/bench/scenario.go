package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kvgate/kvgate/internal/harness"
)

// Scenarios of a fleet that is not steady (issue 21), each against the clean row of the same
// configuration: the fleet as operators see it in a rollout, a gateway restart beside starting
// engines, a scale-up, a worker recovering or being drained.
const (
	// scenarioRace starts one worker, then the gateways and, raceDelay later, the other
	// workers, and starts the load when the gateways say they are ready: a gateway started
	// beside engines that come up at different times.
	scenarioRace = "race"
	// scenarioLate starts with every worker but the last; the last joins lateAfter into the
	// load (the gateways' config file lists it then, as a scale-up or a discovery would).
	scenarioLate = "late"
	// scenarioLeave starts with every worker; the last is drained leaveAfter into the load
	// (the config file stops listing it).
	scenarioLeave = "leave"
)

// Wall-time defaults of the scenarios' moments: the full bench's load lasts about 30 s of wall
// time at its time scale, so a join at 5 s meets a loaded fleet with most of the run to go.
const (
	defaultRaceDelay  = time.Second
	defaultLateAfter  = 5 * time.Second
	defaultLeaveAfter = 10 * time.Second
)

func parseScenarios(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		switch f = strings.TrimSpace(f); f {
		case "":
		case scenarioRace, scenarioLate, scenarioLeave:
			out = append(out, f)
		default:
			return nil, fmt.Errorf("unknown scenario %q (known: race, late, leave)", f)
		}
	}
	return out, nil
}

// startFleet starts the processes of run run of c: cold simulators, the gateway replicas and
// nginx, in the order and with the workers c's scenario asks for.
func (r *runner) startFleet(ctx context.Context, c configuration, run int) (*fleet, error) {
	f := &fleet{}
	tag := fmt.Sprintf("%s-run%d", c.tag(), run)
	ok := false
	defer func() {
		if !ok {
			f.stop()
		}
	}()
	if c.Workload == workloadOverload {
		r.overloadFleet(f, c)
	}
	if c.Workload == workloadResponses {
		if err := r.agentFleet(ctx, f, c, tag); err != nil {
			return nil, err
		}
	}
	if c.Workload == workloadMessages {
		if err := r.messagesFleet(f); err != nil {
			return nil, err
		}
	}
	switch {
	case c.Fleet != "":
		if err := r.startPDFleet(ctx, f, c, tag); err != nil {
			return nil, err
		}
	case c.Scenario == scenarioRace:
		if err := r.startRace(ctx, f, c, tag); err != nil {
			return nil, err
		}
	case c.Scenario == scenarioLate || c.Scenario == scenarioLeave:
		if err := r.startSims(ctx, f, tag, nil, 0, r.o.sims); err != nil {
			return nil, err
		}
		n := len(f.sims) // leave: every worker at the start
		if c.Scenario == scenarioLate {
			n--
		}
		f.config = filepath.Join(r.l.LogDir, tag+".workers.yaml")
		if err := writeWorkers(f.config, f.workerSpecs(n)); err != nil {
			return nil, err
		}
		if err := r.startGateways(ctx, f, c, nil, false); err != nil {
			return nil, err
		}
	default:
		if err := r.startSims(ctx, f, tag, nil, 0, r.o.sims); err != nil {
			return nil, err
		}
		if err := r.startGateways(ctx, f, c, f.workerSpecs(len(f.sims)), false); err != nil {
			return nil, err
		}
	}
	if err := r.startNginx(ctx, f); err != nil {
		return nil, err
	}
	ok = true
	return f, nil
}

// startRace starts the first worker, then the gateways over every worker and, raceDelay after
// the gateways began starting (not after they are up: a rollout starts them together), the other
// workers at the ports the gateways expect; then it waits, as a load balancer would, until every
// gateway is ready. A gateway whose first health checks find one worker up and the others not
// yet is what this measures (issue 21: it was ready with one and sent it everything).
func (r *runner) startRace(ctx context.Context, f *fleet, c configuration, tag string) error {
	ports := make([][3]int, r.o.sims)
	var workers []string
	for i := range ports {
		p, err := harness.FreeTCPPorts(3)
		if err != nil {
			return err
		}
		copy(ports[i][:], p)
		workers = append(workers, fmt.Sprintf("url=http://127.0.0.1:%d,kv_events=tcp://127.0.0.1:%d,replay=tcp://127.0.0.1:%d", p[0], p[1], p[2]))
	}
	if err := r.startSims(ctx, f, tag, ports, 0, 1); err != nil {
		return err
	}
	gws := &fleet{} // started beside the other simulators: their processes join f afterwards
	done := make(chan error, 1)
	go func() { done <- r.startGateways(ctx, gws, c, workers, true) }()
	t := time.NewTimer(r.o.raceDelay)
	select {
	case <-ctx.Done():
		t.Stop()
	case <-t.C:
	}
	simErr := ctx.Err()
	if simErr == nil {
		simErr = r.startSims(ctx, f, tag, ports, 1, r.o.sims-1)
	}
	gwErr := <-done
	f.gws, f.procs = gws.gws, append(f.procs, gws.procs...)
	if err := errors.Join(gwErr, simErr); err != nil {
		return err
	}
	for _, gw := range f.gws {
		wctx, cancel := context.WithTimeout(ctx, r.l.StartTimeout)
		err := harness.WaitHTTP(wctx, gw.URL+"/readiness", http.StatusOK, gw.Process)
		cancel()
		if err != nil {
			return fmt.Errorf("race: %s not ready: %w", gw.Name, err)
		}
	}
	return nil
}

// scenarioEvent changes the fleet at the scenario's moment of the load (late: the last worker
// joins; leave: it is drained) by rewriting the gateways' config file, which they watch. It
// returns at once; the channel yields the change's error (nil also when ctx ended first or the
// scenario changes nothing) once it is done.
func (r *runner) scenarioEvent(ctx context.Context, c configuration, f *fleet) <-chan error {
	done := make(chan error, 1)
	var after time.Duration
	var n int
	switch c.Scenario {
	case scenarioLate:
		after, n = r.o.lateAfter, len(f.sims)
	case scenarioLeave:
		after, n = r.o.leaveAfter, len(f.sims)-1
	default:
		done <- nil
		return done
	}
	go func() {
		t := time.NewTimer(after)
		defer t.Stop()
		select {
		case <-ctx.Done():
			done <- nil
			return
		case <-t.C:
		}
		done <- writeWorkers(f.config, f.workerSpecs(n))
	}()
	return done
}

// writeWorkers writes a gateway config file listing the workers, replacing the file whole
// (written aside, then renamed) so that a gateway never reads half of it.
func writeWorkers(path string, specs []string) error {
	b, err := yaml.Marshal(map[string][]string{"workers": specs})
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// indexCounts are readIndex's figures as a run's logs keep them (TAG.index.json).
type indexCounts struct {
	Keys   int `json:"index_keys"`
	Blocks int `json:"index_blocks"`
}

// readIndex returns the default pool's distinct block keys and (worker, block) pairs from a
// gateway's GET /workers.
func readIndex(ctx context.Context, adminURL string) (keys, blocks int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, adminURL+"/workers", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("read the index: %w", err)
	}
	defer resp.Body.Close()
	var view struct {
		Pools []struct {
			Default     bool `json:"default"`
			IndexKeys   int  `json:"index_keys"`
			IndexBlocks int  `json:"index_blocks"`
		} `json:"pools"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&view); err != nil {
		return 0, 0, fmt.Errorf("read the index: GET /workers: %w", err)
	}
	for _, p := range view.Pools {
		if p.Default {
			return p.IndexKeys, p.IndexBlocks, nil
		}
	}
	return 0, 0, fmt.Errorf("read the index: GET /workers has no default pool")
}
