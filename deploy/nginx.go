package deploy

import (
	"bytes"
	_ "embed"
	"fmt"
	"text/template"
)

//go:embed nginx/kvgate.conf.tmpl
var nginxTemplateText string

var nginxTemplate = template.Must(template.New("kvgate.conf").Parse(nginxTemplateText))

// NginxParams are the inputs of the nginx template.
type NginxParams struct {
	// Listen is nginx's listen directive argument, e.g. "80" or "127.0.0.1:8080".
	Listen string
	// Upstreams are the gateway replicas as host:port, in round-robin order. At least one.
	Upstreams []string
	// Standalone renders a complete main configuration (pid, logs, temp paths under Prefix)
	// instead of an http-context snippet for /etc/nginx/conf.d.
	Standalone bool
	// Prefix is the directory for pid, logs and temp files when Standalone; it must exist.
	Prefix string
	// WorkerProcesses is nginx's worker_processes when Standalone; 0 means "auto".
	WorkerProcesses int
}

// DefaultNginxParams are the parameters deploy/nginx/kvgate.conf is rendered with: a conf.d
// snippet listening on port 80 in front of three replicas on the default gateway port.
var DefaultNginxParams = NginxParams{
	Listen:    "80",
	Upstreams: []string{"10.0.0.11:30000", "10.0.0.12:30000", "10.0.0.13:30000"},
}

// NginxConfig renders the SSE-safe round-robin nginx configuration for p.
func NginxConfig(p NginxParams) (string, error) {
	if len(p.Upstreams) == 0 {
		return "", fmt.Errorf("deploy: nginx config: no upstreams")
	}
	if p.Listen == "" {
		return "", fmt.Errorf("deploy: nginx config: empty listen")
	}
	if p.Standalone && p.Prefix == "" {
		return "", fmt.Errorf("deploy: nginx config: standalone needs a prefix directory")
	}
	data := struct {
		NginxParams
		WorkerProcesses string
	}{NginxParams: p, WorkerProcesses: "auto"}
	if p.WorkerProcesses > 0 {
		data.WorkerProcesses = fmt.Sprint(p.WorkerProcesses)
	}
	var b bytes.Buffer
	if err := nginxTemplate.Execute(&b, data); err != nil {
		return "", fmt.Errorf("deploy: nginx config: %w", err)
	}
	return b.String(), nil
}
