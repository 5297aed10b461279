// Command atnode runs an adaptive-timeout node: an agent that joins a
// cluster and serves the HTTP API, or a whole demo cluster in one process.
// Run "atnode help" for the usage text.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// usage is the text of "atnode help" and "atnode -h".
const usage = `atnode: adaptive request timeouts shared across a cluster.

Every node records the latency its callers observe per destination, gossips
its sealed sub-windows to its peers, and answers "what timeout should this
request use?" from the fleet's P99.99 latency (with a local guard and
exponential backoff when there is too little data).

Usage:
  atnode demo [flags]      run a 5-node cluster in one process, with simulated
                           traffic and a live dashboard at http://127.0.0.1:8080/
  atnode agent [flags]     run one node: join a cluster, serve the HTTP API
  atnode keygen [-o FILE]  write a new gossip encryption key (base64, 32 bytes)
                           to FILE (created with mode 0600), or print it
  atnode version           print the version
  atnode help              print this text

"atnode agent -h" and "atnode demo -h" list each command's flags.

Try it:
  atnode demo              then open http://127.0.0.1:8080/ (Ctrl-C stops)

A 3-node cluster on one machine (three terminals):
  atnode keygen -o cluster.key
  atnode agent -name a -bind 127.0.0.1:7946 -http 127.0.0.1:8080 -secret-key-file cluster.key
  atnode agent -name b -bind 127.0.0.1:7947 -http 127.0.0.1:8081 -secret-key-file cluster.key -join 127.0.0.1:7946
  atnode agent -name c -bind 127.0.0.1:7948 -http 127.0.0.1:8082 -secret-key-file cluster.key -join 127.0.0.1:7946

  curl -s -X POST 127.0.0.1:8080/v1/record -H 'Content-Type: application/json' -d '{"samples":[{"dest":"db-1","latency_ms":12.5}]}'
  curl -s '127.0.0.1:8081/v1/estimate?dest=db-1'
  curl -s '127.0.0.1:8082/v1/timeout?dest=db-1&attempt=1'
  curl -s 127.0.0.1:8080/v1/members

  Port 0 picks a free port; each agent prints the addresses it bound, one
  line per listener: "gossip 127.0.0.1:PORT" and "http 127.0.0.1:PORT".

Settings come from flags, or from a YAML file given with -config whose keys
are the flag names with '_' for '-' (e.g. "sub_window: 6s"); a flag given on
the command line wins over the file.

Secure defaults: gossip and the HTTP API bind to loopback. An agent whose
gossip address is not loopback refuses to start without -secret-key-file
(gossip is then encrypted and authenticated), and one whose HTTP address is
not loopback refuses to start without -http-token-file (POST endpoints and
/debug/pprof/ then need "Authorization: Bearer <token>"), unless -insecure
is given. Rotate keys without a restart: add the new key to the key file,
send SIGHUP to every agent, move it to the first line, SIGHUP, remove the
old one, SIGHUP.

Signals: SIGINT or SIGTERM leaves the cluster and exits 0 (a second Ctrl-C
kills at once; a repeated SIGTERM is ignored); SIGHUP re-reads
-secret-key-file.

Exit codes: 0 a clean stop; 1 a failure while running (an address in use, a
join refused by the cluster for another -window, -sub-window or histogram
layout, a key or token file that cannot be read); 2 bad usage or a refused
configuration (flags, the -config file, an exposed address without
-insecure, a key or token file refused, a missing command).
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		// A second Ctrl-C kills at once; a second SIGTERM (a supervisor
		// repeating itself) is ignored, so it cannot cut the leave short
		// and turn a clean stop into exit 143.
		signal.Ignore(syscall.SIGTERM)
		stop()
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is atnode with the arguments after the program name; it returns the
// exit code. Cancelling ctx stops a running agent or demo as SIGINT does.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return app{stdout: stdout, stderr: stderr, newNode: newRuntime}.run(ctx, args)
}

// app is atnode's dependencies: where it writes, how it builds nodes, and
// (for tests) where SIGHUPs come from.
type app struct {
	stdout, stderr io.Writer
	newNode        newNodeFunc
	// hangup, when set, replaces the subscription to SIGHUP.
	hangup <-chan os.Signal
}

func (a app) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stderr, usage)
		return 2 // a missing command is bad usage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(a.stdout, usage)
		return 0
	case "agent":
		return a.agent(ctx, args[1:])
	case "demo":
		return a.demo(ctx, args[1:])
	case "keygen":
		return a.keygen(args[1:])
	case "version", "-version", "--version":
		return a.version(args[1:])
	default:
		fmt.Fprintf(a.stderr, "atnode: unknown command %q\natnode: run 'atnode help' for usage\n", args[0])
		return 2
	}
}
