// Command atnode runs an adaptive-timeout node: an agent that joins a
// cluster, or a demo cluster in one process.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `atnode: adaptive request timeouts shared across a cluster.

Usage:
  atnode demo      run a whole cluster in one process with a live dashboard
  atnode agent     run one node
  atnode keygen    print a new gossip encryption key
  atnode version   print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return 0
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "demo":
		// Placeholder until the demo lands: the README's run command must succeed.
		fmt.Fprintf(stdout, "atnode demo: not built yet\n\n%s", usage)
		return 0
	default:
		fmt.Fprintf(stderr, "atnode: %q is not built yet\n\n%s", args[0], usage)
		return 2
	}
}
