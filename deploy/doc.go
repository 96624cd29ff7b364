// Package deploy holds kvgate's deployment files (nginx, Prometheus, Grafana, Kubernetes,
// systemd, Docker) and the few Go helpers that render them for a concrete set of addresses:
// NginxConfig renders the SSE-safe round-robin nginx configuration for N gateway replicas, and
// PrometheusConfig rewrites the shipped scrape configuration for given targets. The end-to-end
// test and tools/bench use these helpers so that what they run is what is shipped.
//
// deploy_test.go checks that every YAML and JSON file parses, that the committed
// nginx/kvgate.conf is the template's rendering, that promtool accepts the Prometheus files (when
// promtool is installed) and that every metric name used by the dashboard and the rules (parsed
// with Prometheus's own PromQL parser) is one that kvgate or the simulator really registers
// (collected from the Go source by internal/metricnames).
package deploy
