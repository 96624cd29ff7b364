// Package router is the gateway's HTTP surface: the public API's routes, each an endpoint
// (pkg/endpoint) run by the request pipeline (pkg/pipeline), the admin API (/workers), the
// debug API (/debug/route, explained by the pipeline) and the request metrics. The workers
// and their pools live in pkg/fleet, the client keys in pkg/clientauth; the router wires them
// to the routes.
//
// Two handlers: Handler is the public API (/v1/*, /health, /readiness), behind Config.Clients
// when set; AdminHandler the admin API (/workers, /debug/route), to be served on separate
// listeners (DESIGN.md §11).
//
// A request, file by file: server.go routes it to its endpoint, counts it (metrics.go) and,
// with tracing on, starts its server span; the endpoint's handler runs the pipeline. health.go
// and models.go answer the probes and GET /v1/models from the fleet; admin.go changes the
// fleet; debug.go explains a route without sending it.
//
// Lifecycle: New validates a Config (building the pipeline and its fleet) and starts nothing;
// Run runs the pipeline's background work and returns when it has stopped.
package router
