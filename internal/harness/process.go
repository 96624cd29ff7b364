package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultStopTimeout is how long Stop waits after SIGTERM before it kills the process group.
const DefaultStopTimeout = 10 * time.Second

// groupDrainTimeout bounds the wait, once a process exited and the rest of its group was sent
// SIGKILL, for those processes to disappear: the kernel tears them down asynchronously.
const groupDrainTimeout = 5 * time.Second

// outputDrainTimeout is exec.Cmd.WaitDelay for Run: how long to wait, after the process exited,
// for its output pipes to close (a descendant that left the process group may hold them open).
const outputDrainTimeout = 2 * time.Second

// Command describes a child process for Start and Run. The zero value is not usable: set Path.
type Command struct {
	// Name labels the process in errors and names its log file (Start); default: the base
	// name of Path.
	Name string
	// Path is the program: a path, or a name looked up in PATH.
	Path string
	// Args are the arguments after the program name.
	Args []string
	// Env entries (KEY=VALUE) are added to this process's environment.
	Env []string
	// Dir is the working directory; "" keeps this process's.
	Dir string
}

func (c Command) name() string {
	if c.Name != "" {
		return c.Name
	}
	return filepath.Base(c.Path)
}

// Process is a child process started by Start (or internally by Run). It must not be copied. Its
// methods are safe for concurrent use.
type Process struct {
	// Name is the label used in log file names and error messages.
	Name string
	// LogPath is the file receiving the process's stdout and stderr.
	LogPath string

	cmd    *exec.Cmd
	marker string        // the run marker in the child's environment (see doc.go)
	done   chan struct{} // closed once the process and the rest of its group are gone and it is reaped
	err    error         // cmd.Wait's result; read only after done is closed
	// groupErr names the members of the group still running groupDrainTimeout after the
	// group kill; read only after done is closed.
	groupErr error

	// mu guards exited, which the waiter sets once the process has exited. The group is
	// signalled only while exited is false: until then the process is not reaped, so its pid,
	// which is the group's id, cannot have been given to another process (pid_max may be as
	// low as 32768, so reuse within a run is real).
	mu     sync.Mutex
	exited bool
}

// Start starts c in its own process group, with stdout and stderr appended to
// logDir/<Name>.log (which begins with a "# path args" line), and returns it running. The
// caller owns the process and must call Stop or Kill.
//
// Whatever the process forks stays in its group (nginx workers, a script's commands), and the
// group never outlives the process: once the process exits, for whatever reason, the rest of
// its group gets SIGKILL, and Done is closed only after they are gone. If this process dies
// first, even by SIGKILL, the child gets SIGTERM from the kernel (Pdeathsig); doc.go lists what
// that does not cover.
func Start(c Command, logDir string) (*Process, error) {
	name := c.name()
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("harness: start %s: %w", name, err)
	}
	fmt.Fprintf(f, "# %s %s\n", c.Path, strings.Join(c.Args, " "))
	// An *os.File is passed to the child directly: no copying goroutine.
	p, err := start(c, f, f, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	p.LogPath = logPath
	return p, nil
}

// Run runs c to completion in its own process group, as Start does, with its output written to
// stdout and stderr (nil discards it), and returns once the process and the rest of its group
// are gone. A non-zero exit is returned as an error wrapping the *exec.ExitError. When ctx is
// done first, Run stops the process (Stop with DefaultStopTimeout) and returns an error
// wrapping ctx.Err().
func Run(ctx context.Context, c Command, stdout, stderr io.Writer) error {
	p, err := start(c, stdout, stderr, nil)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		_ = p.Stop(DefaultStopTimeout)
		return fmt.Errorf("harness: %s: %w", p.Name, ctx.Err())
	}
	if p.groupErr != nil {
		return p.groupErr
	}
	if p.err != nil {
		return fmt.Errorf("harness: %s: %w", p.Name, p.err)
	}
	return nil
}

// CombinedOutput is Run with stdout and stderr collected in one buffer, which it returns.
func CombinedOutput(ctx context.Context, c Command) ([]byte, error) {
	var b bytes.Buffer
	err := Run(ctx, c, &b, &b) // exec serialises writes when both are the same writer
	return b.Bytes(), err
}

// start starts c with the given output; log (when not nil) is closed once the process is gone.
func start(c Command, stdout, stderr io.Writer, log io.Closer) (*Process, error) {
	name := c.name()
	if c.Path == "" {
		return nil, fmt.Errorf("harness: start %s: no Path", name)
	}
	marker := thisRun.childMarker()
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// The marker goes last: exec keeps the last of duplicate keys, and this process's own
	// marker (when it was started by a harness itself) is in os.Environ.
	cmd.Env = append(append(os.Environ(), c.Env...), runEnv+"="+marker)
	// SIGTERM rather than SIGKILL when this process dies: nginx's master then takes its workers
	// down (SIGKILLed, it leaves them running), and every kvgate binary exits on SIGTERM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.WaitDelay = outputDrainTimeout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("harness: start %s: %w", name, err)
	}
	thisRun.addGroup(cmd.Process.Pid)
	p := &Process{Name: name, cmd: cmd, marker: marker, done: make(chan struct{})}
	go p.wait(log)
	return p, nil
}

// wait is p's waiter, owned by p: it returns once the process has exited, which Stop and Kill
// guarantee.
func (p *Process) wait(log io.Closer) {
	defer close(p.done)
	pid := p.cmd.Process.Pid
	waitExited(pid)
	p.mu.Lock()
	p.exited = true
	p.mu.Unlock()
	// The process is a zombie now, holding its pid and so the group id: kill what it leaves
	// behind (nginx workers of a master that was SIGKILLed keep running otherwise).
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	p.groupErr = drainGroup(p.Name, pid, groupDrainTimeout)
	if p.groupErr == nil {
		thisRun.removeGroup(pid)
	}
	p.err = p.cmd.Wait()
	if log != nil {
		log.Close()
	}
}

// waitExited blocks until the child pid has exited, without reaping it (WNOWAIT), so its pid
// stays taken while the rest of its group is killed.
func waitExited(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return // nil, or an error cmd.Wait will report too
		}
	}
}

// signalGroup sends sig to p's process group while p has not exited, and reports whether it did.
func (p *Process) signalGroup(sig syscall.Signal) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return false
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	return true
}

// Pid returns the process id, which is also its process group's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done returns a channel closed once the process has exited, the rest of its process group is
// gone (or groupDrainTimeout passed) and the process is reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether Done is closed, and the process's Wait error if so.
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

// Kill sends SIGKILL to the process group and waits until Done is closed. It is the abrupt
// "the worker died" action tests use; Stop is the orderly one.
func (p *Process) Kill() {
	p.signalGroup(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM to the process group and waits up to timeout for the process to exit, then
// kills the group with SIGKILL; either way it returns once Done is closed. It returns the
// process's exit error when it exited by itself with a non-zero status, an error when it had to
// be killed or members of its group outlived it, and nil for a clean exit or an exit caused by
// the signal. Stop may be called more than once.
func (p *Process) Stop(timeout time.Duration) error {
	if p.signalGroup(syscall.SIGTERM) {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case <-p.done:
		case <-timer.C:
			p.Kill()
			return errors.Join(fmt.Errorf("harness: stop %s: still running %v after SIGTERM, killed", p.Name, timeout), p.groupErr)
		}
	}
	<-p.done
	if p.groupErr != nil {
		return p.groupErr
	}
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
