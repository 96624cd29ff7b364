package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Binaries are the paths of the built kvgate commands (see Build).
type Binaries struct {
	Gateway, Simworker, Loadgen, Kvbridge string
}

// Launcher starts the kvgate processes of a test or benchmark fleet on loopback with free
// ports. The zero value is not usable: set Bin, Tokenizer, Model and LogDir.
type Launcher struct {
	Bin Binaries
	// Tokenizer is the tokenizer.json both the simulators and the gateways use; gateways get
	// its directory as --model-path, so they render chat requests with the model's template.
	Tokenizer string
	// Model is the served model name.
	Model string
	// LogDir receives one log file per process.
	LogDir string
	// StartTimeout bounds each process's wait for readiness (default 60s: the machine is shared
	// and loading a tokenizer takes a moment).
	StartTimeout time.Duration
}

func (l *Launcher) startTimeout() time.Duration {
	if l.StartTimeout > 0 {
		return l.StartTimeout
	}
	return 60 * time.Second
}

// SimOptions configure one simulator.
type SimOptions struct {
	// Name labels the log file; default "sim<port>".
	Name string
	// Events makes the simulator publish KV events on a ZMQ PUB with a replay ROUTER.
	Events bool
	// TimeScale is the simulator's --time-scale (wall = simulated × F); 0 keeps its default.
	TimeScale float64
	// Args are extra simworker flags.
	Args []string
	// Port, EventsPort and ReplayPort fix the HTTP, ZMQ PUB and replay ports (0: a free port),
	// e.g. to restart a simulator where a gateway expects it.
	Port, EventsPort, ReplayPort int
	// TLS, when set, serves the simulator's HTTP (then https://) and gRPC ports over TLS.
	TLS *SimTLS
	// Host is the loopback address the simulator listens on (default 127.0.0.1): simulators
	// on 127.0.0.2, .3, ... may then share ports, as the pods behind one DNS name do.
	Host string
}

// SimTLS are the TLS files of a simulator: its server certificate (--tls-cert, --tls-key),
// the CAs it requires client certificates from (--tls-client-ca, optional), and what the
// harness's readiness probe trusts (CAFile) and presents (ClientCertFile, ClientKeyFile: needed
// with ClientCAFile).
type SimTLS struct {
	CertFile, KeyFile, ClientCAFile       string
	CAFile, ClientCertFile, ClientKeyFile string
}

// client returns an HTTP client trusting t.CAFile and presenting the client certificate.
func (t *SimTLS) client() (*http.Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("harness: sim tls: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		tc.RootCAs.AppendCertsFromPEM(pem)
	}
	if t.ClientCertFile != "" {
		c, err := tls.LoadX509KeyPair(t.ClientCertFile, t.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("harness: sim tls: %w", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}, nil
}

// Sim is a running simulator.
type Sim struct {
	*Process
	Port int
	// URL is the OpenAI base URL, http://127.0.0.1:PORT.
	URL string
	// KVEvents and Replay are the tcp:// endpoints a gateway connects to ("" without events).
	KVEvents, Replay string
}

// MetricsURL is the simulator's Prometheus endpoint.
func (s *Sim) MetricsURL() string { return s.URL + "/metrics" }

// WorkerSpec is the gateway --worker value for s; with events false the event endpoints are
// left out even when s publishes them, so the gateway scores s from its approximate tree.
func (s *Sim) WorkerSpec(events bool) string {
	spec := "url=" + s.URL
	if events && s.KVEvents != "" {
		spec += ",kv_events=" + s.KVEvents + ",replay=" + s.Replay
	}
	return spec
}

// StartSim starts a simulator and waits until its /health answers 200.
func (l *Launcher) StartSim(ctx context.Context, o SimOptions) (*Sim, error) {
	ports, err := FreeTCPPorts(3)
	if err != nil {
		return nil, err
	}
	for i, fixed := range []int{o.Port, o.EventsPort, o.ReplayPort} {
		if fixed != 0 {
			ports[i] = fixed
		}
	}
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	s := &Sim{Port: ports[0], URL: fmt.Sprintf("http://%s:%d", host, ports[0])}
	// The model directory, not just tokenizer.json: the simulator then serves chat with its template.
	args := []string{"--host", host, "--port", fmt.Sprint(s.Port), "--tokenizer", filepath.Dir(l.Tokenizer), "--model", l.Model}
	probe := &http.Client{Timeout: 2 * time.Second}
	if o.TLS != nil {
		s.URL = fmt.Sprintf("https://%s:%d", host, ports[0])
		args = append(args, "--tls-cert", o.TLS.CertFile, "--tls-key", o.TLS.KeyFile)
		if o.TLS.ClientCAFile != "" {
			args = append(args, "--tls-client-ca", o.TLS.ClientCAFile)
		}
		if probe, err = o.TLS.client(); err != nil {
			return nil, err
		}
	}
	if o.Events {
		s.KVEvents = fmt.Sprintf("tcp://%s:%d", host, ports[1])
		s.Replay = fmt.Sprintf("tcp://%s:%d", host, ports[2])
		args = append(args, "--kv-events", s.KVEvents, "--kv-replay", s.Replay)
	}
	if o.TimeScale > 0 {
		args = append(args, "--time-scale", fmt.Sprint(o.TimeScale))
	}
	args = append(args, o.Args...)
	name := o.Name
	if name == "" {
		name = fmt.Sprintf("sim%d", s.Port)
	}
	p, err := Start(Command{Name: name, Path: l.Bin.Simworker, Args: args}, l.LogDir)
	if err != nil {
		return nil, err
	}
	s.Process = p
	defer probe.CloseIdleConnections()
	if err := l.waitReadyWith(ctx, probe, s.URL+"/health", p); err != nil {
		return nil, err
	}
	return s, nil
}

// GatewayOptions configure one gateway replica.
type GatewayOptions struct {
	// Name labels the log file; default "gateway<port>".
	Name string
	// Workers are --worker specs.
	Workers []string
	// Policy is --policy (default: the gateway's, cache_aware).
	Policy string
	// KVIndex is --kv-index (auto or off; default: the gateway's, auto).
	KVIndex string
	// Args are extra gateway flags (e.g. --health-interval).
	Args []string
	// NotReadyOK returns once /health answers, without waiting for /readiness.
	NotReadyOK bool
	// Env entries (KEY=VALUE) are added to the gateway's environment (say,
	// KVGATE_ADMIN_TOKEN, which then stays off the command line).
	Env []string
}

// Gateway is a running gateway replica.
type Gateway struct {
	*Process
	Port, PromPort, AdminPort int
	// URL is the API base, http://127.0.0.1:PORT; AdminURL the admin listener's
	// (/workers, /debug/route), http://127.0.0.1:ADMINPORT.
	URL, AdminURL string
}

// MetricsURL is the gateway's Prometheus endpoint.
func (g *Gateway) MetricsURL() string { return fmt.Sprintf("http://127.0.0.1:%d/metrics", g.PromPort) }

// StartGateway starts a gateway replica and waits until /readiness answers 200 (every event
// stream connected and a healthy worker), or only /health with NotReadyOK.
func (l *Launcher) StartGateway(ctx context.Context, o GatewayOptions) (*Gateway, error) {
	ports, err := FreeTCPPorts(3)
	if err != nil {
		return nil, err
	}
	g := &Gateway{Port: ports[0], PromPort: ports[1], AdminPort: ports[2], URL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		AdminURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2])}
	args := []string{"--host", "127.0.0.1", "--port", fmt.Sprint(g.Port), "--prometheus-port", fmt.Sprint(g.PromPort),
		"--admin-host", "127.0.0.1", "--admin-port", fmt.Sprint(g.AdminPort), "--model-path", filepath.Dir(l.Tokenizer), "--model", l.Model}
	for _, w := range o.Workers {
		args = append(args, "--worker", w)
	}
	if o.Policy != "" {
		args = append(args, "--policy", o.Policy)
	}
	if o.KVIndex != "" {
		args = append(args, "--kv-index", o.KVIndex)
	}
	args = append(args, o.Args...)
	name := o.Name
	if name == "" {
		name = fmt.Sprintf("gateway%d", g.Port)
	}
	p, err := Start(Command{Name: name, Path: l.Bin.Gateway, Args: args, Env: o.Env}, l.LogDir)
	if err != nil {
		return nil, err
	}
	g.Process = p
	path := "/readiness"
	if o.NotReadyOK {
		path = "/health"
	}
	if err := l.waitReady(ctx, g.URL+path, p); err != nil {
		return nil, err
	}
	return g, nil
}

// NginxOptions configure the nginx in front of the gateways.
type NginxOptions struct {
	// Config renders the nginx configuration for a listen address, the upstreams and a prefix
	// directory (deploy.NginxConfig with Standalone set, in practice).
	Config func(listen string, upstreams []string, prefix string) (string, error)
	// Upstreams are the gateways' host:port.
	Upstreams []string
}

// Nginx is a running nginx.
type Nginx struct {
	*Process
	Port int
	// URL is http://127.0.0.1:PORT.
	URL string
}

// StartNginx writes the configuration to a fresh directory under LogDir and runs
// `nginx -p DIR -c DIR/nginx.conf -e DIR/error.log -g 'daemon off;'` until Stop. It waits until
// the port accepts requests (any HTTP status counts: the upstreams may not be ready). The
// master stays in the foreground (daemon off) with master_process on, so it is the process the
// harness started and its workers are in its process group: Stop's SIGTERM is nginx's fast
// shutdown, and the group kill removes any worker left (see doc.go).
func (l *Launcher) StartNginx(ctx context.Context, o NginxOptions) (*Nginx, error) {
	port, err := FreeTCPPort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(l.LogDir, "nginx")
	if err != nil {
		return nil, fmt.Errorf("harness: nginx: %w", err)
	}
	conf, err := o.Config(fmt.Sprintf("127.0.0.1:%d", port), o.Upstreams, dir)
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("harness: nginx: %w", err)
	}
	p, err := Start(Command{Name: "nginx", Path: "nginx", Args: []string{"-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log"), "-g", "daemon off;"}}, l.LogDir)
	if err != nil {
		return nil, err
	}
	n := &Nginx{Process: p, Port: port, URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	ctx, cancel := context.WithTimeout(ctx, l.startTimeout())
	defer cancel()
	// /health is proxied to a gateway; any status proves nginx listens.
	if err := waitAnyStatus(ctx, n.URL+"/health", p); err != nil {
		_ = p.Stop(DefaultStopTimeout)
		return nil, fmt.Errorf("%w\n%s", err, readFileTail(filepath.Join(dir, "error.log")))
	}
	return n, nil
}

func (l *Launcher) waitReady(ctx context.Context, url string, p *Process) error {
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	return l.waitReadyWith(ctx, client, url, p)
}

// waitReadyWith is waitReady probing with client.
func (l *Launcher) waitReadyWith(ctx context.Context, client *http.Client, url string, p *Process) error {
	ctx, cancel := context.WithTimeout(ctx, l.startTimeout())
	defer cancel()
	if err := WaitHTTPClient(ctx, client, url, http.StatusOK, p); err != nil {
		_ = p.Stop(DefaultStopTimeout)
		return fmt.Errorf("%w\n---- %s log tail ----\n%s", err, p.Name, p.LogTail(3000))
	}
	return nil
}

// waitAnyStatus polls url until any HTTP response arrives.
func waitAnyStatus(ctx context.Context, url string, p *Process) error {
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	ok := Eventually(time.Until(deadlineOf(ctx)), func() bool {
		if done, _ := p.Exited(); done {
			return true
		}
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	if done, err := p.Exited(); done {
		return fmt.Errorf("harness: %s exited: %v", p.Name, err)
	}
	if !ok {
		return fmt.Errorf("harness: %s: no answer on %s", p.Name, url)
	}
	return nil
}

func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Minute)
}

func readFileTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := string(b)
	if len(s) > 3000 {
		s = s[len(s)-3000:]
	}
	return strings.TrimSpace(s)
}

// Prometheus is a running Prometheus server.
type Prometheus struct {
	*Process
	Port int
	// URL is http://127.0.0.1:PORT.
	URL string
}

// StartPrometheus writes config (and rules, when not nil, as rules.yml next to it, which is
// what the shipped configuration's rule_files names) to a fresh directory under LogDir, runs
// the Debian `prometheus` binary with its TSDB in that directory on a free loopback port, and
// waits until /-/ready answers 200.
func (l *Launcher) StartPrometheus(ctx context.Context, config, rules []byte) (*Prometheus, error) {
	port, err := FreeTCPPort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(l.LogDir, "prometheus")
	if err != nil {
		return nil, fmt.Errorf("harness: prometheus: %w", err)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, config, 0o644); err != nil {
		return nil, fmt.Errorf("harness: prometheus: %w", err)
	}
	if rules != nil {
		if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o644); err != nil {
			return nil, fmt.Errorf("harness: prometheus: %w", err)
		}
	}
	args := []string{
		"--config.file=" + cfgPath,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
		"--log.level=warn",
	}
	p, err := Start(Command{Name: "prometheus", Path: "prometheus", Args: args}, l.LogDir)
	if err != nil {
		return nil, err
	}
	pr := &Prometheus{Process: p, Port: port, URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	if err := l.waitReady(ctx, pr.URL+"/-/ready", p); err != nil {
		return nil, err
	}
	return pr, nil
}
