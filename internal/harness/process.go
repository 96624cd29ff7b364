package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// DefaultStopTimeout is how long Stop waits after SIGTERM before it kills the process group.
const DefaultStopTimeout = 10 * time.Second

// Process is a child process started by StartProcess, with stdout and stderr written to one log
// file. It must not be copied. Its methods are safe for concurrent use.
type Process struct {
	// Name is the label used in log file names and error messages.
	Name string
	// LogPath is the file receiving the process's stdout and stderr.
	LogPath string

	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed after cmd.Wait returned and err was set
	err  error         // cmd.Wait's result; read only after done is closed
}

// StartProcess starts bin with args, stdout and stderr appended to logDir/<name>.log. The child
// runs in its own process group (so Stop also reaches the children it forks, e.g. nginx
// workers) and gets SIGKILL if the starting process dies. env entries are added to the current
// environment. The returned process is running; the caller owns it and must call Stop.
func StartProcess(name, bin string, args []string, logDir string, env ...string) (*Process, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("harness: start %s: %w", name, err)
	}
	fmt.Fprintf(f, "# %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout = f // an *os.File is passed to the child directly: no copying goroutine
	cmd.Stderr = f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("harness: start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, log: f, done: make(chan struct{})}
	// The waiter is owned by p: it ends when the process exits, which Stop guarantees.
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done returns a channel closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and its Wait error if so.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Signal sends sig to the process (not its group). Signalling an exited process is not an error.
func (p *Process) Signal(sig os.Signal) error {
	if ok, _ := p.Exited(); ok {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("harness: signal %s: %w", p.Name, err)
	}
	return nil
}

// Kill sends SIGKILL to the process group and waits until the process is reaped. It is the
// abrupt "the worker died" action tests use; Stop is the orderly one.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to timeout for the process to exit, then kills the whole
// process group with SIGKILL and waits for it to be reaped. It returns the process's exit error
// when it exited by itself with a non-zero status after SIGTERM, and nil for a clean exit or an
// exit caused by the signal. Stop may be called more than once.
func (p *Process) Stop(timeout time.Duration) error {
	if ok, _ := p.Exited(); !ok {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case <-p.done:
		case <-timer.C:
			p.Kill()
			return fmt.Errorf("harness: stop %s: still running %v after SIGTERM, killed", p.Name, timeout)
		}
	}
	// Whatever the child forked into its group is gone too once the leader is reaped.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return nil
		}
		return fmt.Errorf("harness: %s exited: %w", p.Name, p.err)
	}
	return p.err
}

// LogTail returns the last max bytes of the process's log (the whole log when shorter).
func (p *Process) LogTail(max int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.LogPath, err)
	}
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
