package integration

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
)

// atnodeBin is the atnode binary TestMain built, "" if the build failed
// (buildErr says why; the process tests then fail with it).
var (
	atnodeBin string
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "atnode-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		os.Exit(1)
	}
	atnodeBin, buildErr = buildAtnode(dir)
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := findLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// findLeaks runs goleak until it finds no goroutine left, for at most 5 s:
// memberlist's Shutdown does not wait for a probe or push/pull in flight,
// which ends on its own within a probe interval; a goroutine still there
// after 5 s is a leak.
func findLeaks() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// buildAtnode builds cmd/atnode into dir, once for the whole package.
func buildAtnode(dir string) (string, error) {
	bin := filepath.Join(dir, "atnode")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/adaptivetimeout/adaptivetimeout/cmd/atnode")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build cmd/atnode: %v\n%s", err, out.Bytes())
	}
	return bin, nil
}

// waitWide bounds every poll: far above the times measured (an epoch
// converges in about a second), so only a real failure hits it.
const waitWide = 30 * time.Second

// eventually polls cond every 20 ms until it holds, and fails the test
// with what (and cond's last explanation) when waitWide passes. It returns
// how long it took.
func eventually(t testing.TB, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	return eventuallyWithin(t, waitWide, what, cond)
}

func eventuallyWithin(t testing.TB, limit time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, why := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("not within %v: %s: %s", limit, what, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testLogger is testutil.Logger.
func testLogger(t testing.TB) *slog.Logger { return testutil.Logger(t) }
