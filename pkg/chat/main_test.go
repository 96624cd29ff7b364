package chat

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// sandboxEnv makes the test binary act as the sandbox child (Sandbox.Command is the test
// binary itself), as `gateway render-sandbox` does in production.
const sandboxEnv = "KVGATE_CHAT_TEST_SANDBOX"

func TestMain(m *testing.M) {
	if os.Getenv(sandboxEnv) == "1" {
		os.Exit(ServeSandbox(os.Stdin, os.Stdout))
	}
	goleak.VerifyTestMain(m)
}
