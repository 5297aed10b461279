package integration

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImportBoundaries pins the dependency rules README's Layout states:
// packages depend one way; only cluster and internal/memtransport import
// memberlist, only node and cmd/atnode import Prometheus, only the adapter
// packages import grpc-go or failsafe-go, and node imports no adapter
// (non-test code); tracker, timeout and codec do no I/O.
func TestImportBoundaries(t *testing.T) {
	const mod = "github.com/adaptivetimeout/adaptivetimeout"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, mod+"/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	imports := map[string][]string{}
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(f[0], mod), "/")
		for _, imp := range f[1:] {
			if rest, ok := strings.CutPrefix(imp, mod+"/"); ok {
				imp = rest
			}
			imports[pkg] = append(imports[pkg], imp)
		}
	}
	require.Contains(t, imports, "tracker", "go list output: %s", out)

	importers := func(prefix string) []string {
		var who []string
		for pkg, imps := range imports {
			if slices.ContainsFunc(imps, func(i string) bool { return strings.HasPrefix(i, prefix) }) {
				who = append(who, pkg)
			}
		}
		slices.Sort(who)
		return who
	}
	require.Equal(t, []string{"cluster", "internal/memtransport"}, importers("github.com/hashicorp/memberlist"))
	require.Equal(t, []string{"cmd/atnode", "node"}, importers("github.com/prometheus/"))
	// Only the adapter packages import the ecosystems they adapt to; the pure
	// packages (tracker, timeout, codec) and node import neither.
	require.Equal(t, []string{"timeout/timeoutgrpc"}, importers("google.golang.org/grpc"))
	require.Equal(t, []string{"timeout/timeoutfailsafe"}, importers("github.com/failsafe-go/"))

	// Project packages each may import (the one-way order of README's Layout).
	allowed := map[string][]string{
		"tracker":                 {"internal/fielderr"},
		"timeout":                 {"internal/fielderr", "tracker"},
		"timeout/timeouthttp":     {"internal/netfail", "timeout"},
		"timeout/timeoutgrpc":     {"timeout"},
		"timeout/timeoutfailsafe": {"internal/netfail", "timeout"},
		"codec":                   {"tracker"},
		"cluster":                 {"codec", "internal/fielderr", "internal/smallfile", "tracker"},
		"node/dashboard":          {},
		"node":                    {"cluster", "internal/fielderr", "internal/netfail", "internal/smallfile", "node/dashboard", "timeout", "tracker"},
		"cmd/atnode":              {"cluster", "node", "tracker"},
		"integration/sim":         {"cluster", "codec", "timeout", "tracker"},
		"integration/load":        {"internal/testutil", "node"}, // testutil: the record body node's benchmarks decode
		"internal/memtransport":   {},
		"internal/testutil":       {},
		"internal/netfail":        {},
		"internal/fielderr":       {},
		"internal/smallfile":      {},
		"internal/policytest":     {"timeout", "tracker"}, // the adapters' tests: fakes, and the real NewPolicy over a tracker
	}
	for pkg, imps := range imports {
		for _, imp := range imps {
			if _, project := imports[imp]; !project {
				continue // the standard library or a module dependency
			}
			want, ok := allowed[pkg]
			require.True(t, ok, "package %s is new: add it to the dependency rules", pkg)
			require.Contains(t, want, imp, "%s must not import %s", pkg, imp)
		}
	}

	// node takes a timeout.Policy from the adapters' users; it never imports
	// an adapter.
	for pkg, imps := range imports {
		if pkg == "node" || strings.HasPrefix(pkg, "node/") {
			for _, imp := range imps {
				require.False(t, strings.HasPrefix(imp, "timeout/"), "%s imports the adapter %s", pkg, imp)
			}
		}
	}

	// The pure packages: no network, files or processes.
	for _, pkg := range []string{"tracker", "timeout", "codec"} {
		for _, imp := range imports[pkg] {
			for _, io := range []string{"net", "os", "io/fs", "syscall"} {
				require.False(t, imp == io || strings.HasPrefix(imp, io+"/"), "%s imports %s", pkg, imp)
			}
		}
	}
}
