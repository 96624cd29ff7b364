// Package metricnames finds the Prometheus metric names kvgate's Go source registers, by
// reading the source (go/ast): the Name of every prometheus *Opts literal, NewDesc and
// BuildFQName arguments, and hand-written exposition lines. Tests use it to check that the
// shipped Grafana dashboard and Prometheus rules (deploy/) only query metrics that exist, and
// the end-to-end suite checks it against what the running binaries really serve. It is test
// support: no product binary imports it.
package metricnames
