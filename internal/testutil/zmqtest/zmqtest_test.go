package zmqtest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	zmq "github.com/pebbe/zmq4"
	"go.uber.org/goleak"
)

// pebbe/zmq4 starts no Go goroutines of its own, so no ignore list is needed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRecvWithin(t *testing.T) {
	pull := Socket(t, zmq.PULL)
	if err := pull.Bind("tcp://127.0.0.1:*"); err != nil {
		t.Fatal(err)
	}
	ep, err := pull.GetLastEndpoint()
	if err != nil {
		t.Fatal(err)
	}
	if got := RecvWithin(t, pull, 50*time.Millisecond); got != nil {
		t.Fatalf("got %q before anything was sent, want nil", got)
	}
	push := Socket(t, zmq.PUSH)
	if err := push.Connect(ep); err != nil {
		t.Fatal(err)
	}
	if _, err := push.SendMessage("a", "bc"); err != nil {
		t.Fatal(err)
	}
	got := RecvWithin(t, pull, 10*time.Second)
	if diff := cmp.Diff([][]byte{[]byte("a"), []byte("bc")}, got); diff != "" {
		t.Fatalf("received message mismatch (-want +got):\n%s", diff)
	}
}
