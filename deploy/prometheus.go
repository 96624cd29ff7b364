package deploy

import (
	_ "embed"
	"fmt"

	"go.yaml.in/yaml/v3"
)

//go:embed prometheus/prometheus.yml
var prometheusYAML []byte

//go:embed prometheus/rules.yml
var rulesYAML []byte

// RulesYAML returns the shipped Prometheus rules file (deploy/prometheus/rules.yml).
func RulesYAML() []byte { return append([]byte(nil), rulesYAML...) }

// PrometheusParams are the inputs of PrometheusConfig.
type PrometheusParams struct {
	// Gateways are the kvgate metrics listeners (host:port) for the "kvgate" job.
	Gateways []string
	// Engines are the engines' metrics endpoints (host:port) for the "engines" job.
	Engines []string
	// RulesFile is the path written into rule_files; empty keeps the shipped "rules.yml"
	// (resolved by Prometheus relative to the configuration file).
	RulesFile string
	// ScrapeInterval overrides the global scrape and evaluation interval when not empty
	// (e.g. "1s" in tests).
	ScrapeInterval string
}

// PrometheusConfig returns deploy/prometheus/prometheus.yml with the static targets of the
// "kvgate" and "engines" jobs replaced by p's, so a test or benchmark scrapes its own processes
// with the shipped job names and rules.
func PrometheusConfig(p PrometheusParams) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(prometheusYAML, &cfg); err != nil {
		return nil, fmt.Errorf("deploy: prometheus config: %w", err)
	}
	if p.ScrapeInterval != "" {
		g, _ := cfg["global"].(map[string]any)
		if g == nil {
			g = map[string]any{}
			cfg["global"] = g
		}
		g["scrape_interval"] = p.ScrapeInterval
		g["evaluation_interval"] = p.ScrapeInterval
	}
	if p.RulesFile != "" {
		cfg["rule_files"] = []any{p.RulesFile}
	}
	jobs, _ := cfg["scrape_configs"].([]any)
	seen := map[string]bool{}
	for _, j := range jobs {
		job, _ := j.(map[string]any)
		name, _ := job["job_name"].(string)
		var targets []string
		switch name {
		case "kvgate":
			targets = p.Gateways
		case "engines":
			targets = p.Engines
		default:
			continue
		}
		seen[name] = true
		job["static_configs"] = []any{map[string]any{"targets": targets}}
	}
	if !seen["kvgate"] || !seen["engines"] {
		return nil, fmt.Errorf("deploy: prometheus config: shipped file lacks the kvgate or engines job")
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("deploy: prometheus config: %w", err)
	}
	return out, nil
}

// Rules returns deploy/prometheus/rules.yml with every group's evaluation interval set to
// interval (e.g. "1s" for a test that cannot wait for the shipped 30s); an empty interval
// returns the file unchanged.
func Rules(interval string) ([]byte, error) {
	if interval == "" {
		return RulesYAML(), nil
	}
	var doc map[string]any
	if err := yaml.Unmarshal(rulesYAML, &doc); err != nil {
		return nil, fmt.Errorf("deploy: rules: %w", err)
	}
	groups, _ := doc["groups"].([]any)
	if len(groups) == 0 {
		return nil, fmt.Errorf("deploy: rules: no groups")
	}
	for _, g := range groups {
		if m, ok := g.(map[string]any); ok {
			m["interval"] = interval
		}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("deploy: rules: %w", err)
	}
	return out, nil
}
