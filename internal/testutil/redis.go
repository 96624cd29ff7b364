package testutil

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// Redis is a redis-server a test started on a loopback port.
type Redis struct {
	*harness.Process
	// Addr is 127.0.0.1:PORT, URL redis://Addr/0.
	Addr, URL string
	Port      int
}

// StartRedis starts Debian's redis-server (tools/deps.sh test installs it) on a free loopback
// port, persisting nothing, stops it at cleanup and waits until it answers PING. With port 0 a
// free port is taken; a fixed port restarts a Redis where clients expect it.
func StartRedis(t testing.TB, port int) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (tools/deps.sh test installs it): %v", err)
	}
	if port == 0 {
		port = FreePort(t)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := Start(t, "redis", bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no")
	WaitFor(t, "redis-server to answer PING on "+addr, func() bool { return RedisPing(addr) == nil })
	return &Redis{Process: p, Addr: addr, URL: "redis://" + addr + "/0", Port: port}
}

// RedisPing sends PING to the Redis at addr and checks the answer.
func RedisPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis answered %q", line)
	}
	return nil
}
