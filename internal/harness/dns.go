package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// DNS is a running dnsmasq (Debian's dnsmasq-base) answering for one local domain from a hosts
// file that SetHosts rewrites: the name server of the DNS discovery tests. It forwards nothing
// (--no-resolv) and reads no system file (--no-hosts, no /etc/dnsmasq.conf), so its answers
// are exactly the hosts file's, and a name of the domain that is not there is NXDOMAIN.
type DNS struct {
	*Process
	// Addr is the server's HOST:PORT (127.0.0.1, UDP and TCP), for the gateway's --dns-server.
	Addr string
	// HostsFile is the --addn-hosts file.
	HostsFile string
	dir       string
}

// StartDNS starts dnsmasq on a free port of 127.0.0.1, authoritative for domain (say
// "kvgate.test") with the given hosts-file content ("ADDR NAME" lines), and waits until it
// answers. dnsmasq runs in the foreground as the current user (--user), so it starts, and
// re-reads the hosts file on SIGHUP, without root; with root it does not drop to "nobody",
// who could not read the test's temporary directory.
func (l *Launcher) StartDNS(ctx context.Context, domain, hosts string) (*DNS, error) {
	bin, err := exec.LookPath("dnsmasq")
	if err != nil {
		return nil, fmt.Errorf("harness: dnsmasq not found (Debian package dnsmasq-base; tools/deps.sh test installs it): %w", err)
	}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("harness: dnsmasq: %w", err)
	}
	port, err := FreeTCPPort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(l.LogDir, "dns")
	if err != nil {
		return nil, fmt.Errorf("harness: dnsmasq: %w", err)
	}
	d := &DNS{Addr: fmt.Sprintf("127.0.0.1:%d", port), HostsFile: filepath.Join(dir, "hosts"), dir: dir}
	if err := d.writeHosts(hosts); err != nil {
		return nil, err
	}
	args := []string{"--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--addn-hosts=" + d.HostsFile,
		"--port=" + fmt.Sprint(port), "--listen-address=127.0.0.1", "--bind-interfaces", "--user=" + u.Username, "--pid-file=",
		"--local=/" + domain + "/", "--log-facility=-", "--log-queries", "--cache-size=0"}
	p, err := Start(Command{Name: "dnsmasq", Path: bin, Args: args}, l.LogDir)
	if err != nil {
		return nil, err
	}
	d.Process = p
	// Ready when it answers at all: a name of its domain it does not hold is NXDOMAIN.
	r := d.Resolver()
	deadline := deadlineOf(ctx)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := r.LookupNetIP(qctx, "ip4", "probe."+domain+".")
		cancel()
		var de *net.DNSError
		if err == nil || (errors.As(err, &de) && de.IsNotFound) {
			return d, nil
		}
		if exited, _ := p.Exited(); exited || time.Now().After(deadline) {
			_ = p.Stop(DefaultStopTimeout)
			return nil, fmt.Errorf("harness: dnsmasq did not answer on %s: %v\n%s", d.Addr, err, readFileTail(p.LogPath))
		}
		select {
		case <-ctx.Done():
			_ = p.Stop(DefaultStopTimeout)
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// Resolver returns a resolver that asks this server only.
func (d *DNS) Resolver() *net.Resolver {
	var dialer net.Dialer
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, d.Addr)
	}}
}

// SetHosts replaces the hosts file's content and has dnsmasq re-read it (SIGHUP). The file is
// written in place by rename, so dnsmasq never reads half of it.
func (d *DNS) SetHosts(hosts string) error {
	if err := d.writeHosts(hosts); err != nil {
		return err
	}
	return d.Signal(syscall.SIGHUP)
}

func (d *DNS) writeHosts(hosts string) error {
	tmp := d.HostsFile + ".tmp"
	if !strings.HasSuffix(hosts, "\n") {
		hosts += "\n"
	}
	if err := os.WriteFile(tmp, []byte(hosts), 0o644); err != nil {
		return fmt.Errorf("harness: dns hosts: %w", err)
	}
	if err := os.Rename(tmp, d.HostsFile); err != nil {
		return fmt.Errorf("harness: dns hosts: %w", err)
	}
	return nil
}
