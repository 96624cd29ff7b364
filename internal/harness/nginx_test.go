package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nginxBin returns the Debian nginx, skipping the test when it is not installed.
func nginxBin(t *testing.T) string {
	t.Helper()
	const bin = "/usr/sbin/nginx"
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("nginx not installed (%v): install the Debian package nginx (tools/deps.sh test does) to run the process-group tests", err)
	}
	return bin
}

// nginxArgs writes a two-worker configuration listening on port into dir and returns the
// arguments that run it in the foreground, as the Launcher does.
func nginxArgs(t *testing.T, dir string, port int) []string {
	t.Helper()
	conf := fmt.Sprintf(`worker_processes 2;
pid %[1]s/nginx.pid;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy; fastcgi_temp_path %[1]s/fcgi;
  uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
  server { listen 127.0.0.1:%[2]d; return 204; }
}
`, dir, port)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log"), "-g", "daemon off;"}
}

// awaitWorkers waits until group pgid holds the nginx master and its two workers, and returns
// the members.
func awaitWorkers(t *testing.T, pgid int) []procEntry {
	t.Helper()
	var members []procEntry
	ok := Eventually(defaultTestTimeout, func() bool {
		members, _ = groupMembers(pgid)
		return len(members) == 3
	})
	if !ok {
		t.Fatalf("group %d: got %d running processes %v, want the master and 2 workers", pgid, len(members), members)
	}
	return members
}

// awaitDone waits until p is done, failing t after defaultTestTimeout.
func awaitDone(t *testing.T, p *Process) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(defaultTestTimeout):
		t.Fatalf("%s still not done %v after it was killed", p.Name, defaultTestTimeout)
	}
}

// assertGroupGone fails t when a process of group pgid still runs; the group has had its
// chance to exit, so only a short wait for the kernel's teardown is allowed.
func assertGroupGone(t *testing.T, pgid int) {
	t.Helper()
	if err := drainGroup("nginx", pgid, groupDrainTimeout); err != nil {
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // the survivors pin the group id, so it is still theirs
		t.Fatal(err)
	}
}

// TestStopNginxLeavesNoWorker: Stop on an nginx with two workers returns only when the master
// and both workers are gone.
func TestStopNginxLeavesNoWorker(t *testing.T) {
	bin := nginxBin(t)
	dir := t.TempDir()
	p, err := Start(Command{Name: "nginx", Path: bin, Args: nginxArgs(t, dir, freePort(t))}, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	awaitWorkers(t, p.Pid())
	if err := p.Stop(defaultTestTimeout); err != nil {
		t.Fatalf("Stop: got %v, want nil (nginx exits on SIGTERM)\n%s", err, p.LogTail(2000))
	}
	if left, err := groupMembers(p.Pid()); err != nil || len(left) != 0 {
		t.Fatalf("after Stop: got %v (%v) still running in the group, want none", left, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), procPollInterval)
	defer cancel()
	if err := p.CheckNoSurvivors(ctx); err != nil {
		t.Fatalf("after Stop: got %v, want no survivors", err)
	}
}

// TestNginxWorkersOutliveKilledMaster: nginx workers keep running when only their master is
// SIGKILLed (what cmd.Process.Kill() did in the old benchmark), and the harness kills them as
// soon as the master is gone, so the test fails if that group kill is removed.
func TestNginxWorkersOutliveKilledMaster(t *testing.T) {
	bin := nginxBin(t)
	t.Run("without the harness the workers survive", func(t *testing.T) {
		dir := t.TempDir()
		cmd := exec.Command(bin, nginxArgs(t, dir, freePort(t))...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // only so the test can find the workers
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pgid := cmd.Process.Pid
		t.Cleanup(func() {
			// Killed only while members remain: they keep the group id from being reused.
			if left, _ := groupMembers(pgid); len(left) > 0 {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
			assertGroupGone(t, pgid)
		})
		awaitWorkers(t, pgid)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// The workers would exit at once if they followed their master; give them a moment.
		if Eventually(groupDrainTimeout/5, func() bool { left, _ := groupMembers(pgid); return len(left) == 0 }) {
			t.Fatal("the workers exited with their SIGKILLed master; the premise of the harness's group kill no longer holds")
		}
	})
	t.Run("the harness kills them with the master", func(t *testing.T) {
		dir := t.TempDir()
		p, err := Start(Command{Name: "nginx", Path: bin, Args: nginxArgs(t, dir, freePort(t))}, dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Kill)
		awaitWorkers(t, p.Pid())
		if err := p.Signal(syscall.SIGKILL); err != nil { // the master only
			t.Fatal(err)
		}
		awaitDone(t, p)
		if left, err := groupMembers(p.Pid()); err != nil || len(left) != 0 {
			_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
			t.Fatalf("after the master was SIGKILLed: got %v (%v) still running, want the workers killed", left, err)
		}
		if err := p.Stop(defaultTestTimeout); err != nil {
			t.Errorf("Stop after SIGKILL: got %v, want nil", err)
		}
	})
}

// helperNginxParent (a child of the test) starts nginx with the harness, prints its group, and
// waits to be killed.
func helperNginxParent() {
	dir := os.Getenv("HELPER_DIR")
	args := strings.Split(os.Getenv("HELPER_NGINX_ARGS"), "\x1f")
	p, err := Start(Command{Name: "nginx", Path: os.Getenv("HELPER_NGINX"), Args: args}, dir)
	if err != nil {
		fmt.Println("helper:", err)
		os.Exit(1)
	}
	fmt.Printf("helper: nginx group %d\n", p.Pid())
	waitTerm()
}

var groupRE = regexp.MustCompile(`helper: nginx group (\d+)`)

// TestNginxGoneWhenHarnessIsKilled: when the process that started nginx dies by SIGKILL (a go
// test binary at its timeout, a killed tools/bench), nginx gets SIGTERM from the kernel and
// takes its workers down, so nothing of its group survives.
func TestNginxGoneWhenHarnessIsKilled(t *testing.T) {
	bin := nginxBin(t)
	dir := t.TempDir()
	parent := startHelper(t, "nginx-parent", "HELPER_DIR="+dir, "HELPER_NGINX="+bin,
		"HELPER_NGINX_ARGS="+strings.Join(nginxArgs(t, dir, freePort(t)), "\x1f"))
	var m []string
	if !Eventually(defaultTestTimeout, func() bool { m = groupRE.FindStringSubmatch(parent.LogTail(4000)); return m != nil }) {
		t.Fatalf("the helper did not start nginx:\n%s", parent.LogTail(4000))
	}
	pgid, _ := strconv.Atoi(m[1])
	awaitWorkers(t, pgid)
	if err := parent.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, parent)
	assertGroupGone(t, pgid)
}
