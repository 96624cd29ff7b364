package deploy

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

// grafanaInterval matches the interval variables Grafana substitutes before a query reaches
// Prometheus; any other $variable in a shipped expression is an error (the test would not know
// what it stands for).
var grafanaInterval = regexp.MustCompile(`\$__(rate_interval|interval|range)\b`)

// metricNamesInPromQL returns the metric names an expression selects, in order of first
// appearance, parsed with Prometheus's own PromQL parser (Grafana's interval variables replaced
// by a duration first).
func metricNamesInPromQL(expr string) ([]string, error) {
	e := grafanaInterval.ReplaceAllString(expr, "5m")
	if strings.Contains(e, "$") {
		return nil, fmt.Errorf("unsupported Grafana variable in %q", expr)
	}
	ast, err := parser.NewParser(parser.Options{}).ParseExpr(e)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr, err)
	}
	var names []string
	seen := map[string]bool{}
	parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && vs.Name != "" && !seen[vs.Name] {
			seen[vs.Name] = true
			names = append(names, vs.Name)
		}
		return nil
	})
	return names, nil
}
