package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/node"
)

const agentUsage = `Usage: atnode agent [flags]

Runs one node: joins the cluster through -join, gossips latency with its
peers, and serves the HTTP API and dashboard at -http. Prints one line per
listener with the address bound ("gossip 127.0.0.1:PORT", "http
127.0.0.1:PORT"). SIGINT/SIGTERM leave the cluster and exit 0; SIGHUP
re-reads -secret-key-file. See "atnode help" for a 3-node example.

Exit codes: 0 a clean stop; 1 a failure while running (an address in use,
a join refused by the cluster because -window, -sub-window or the histogram
layout differ from its members', a key or token file that cannot be read);
2 bad usage or a refused configuration.

Flags:
`

// errHelp is returned by the parsers when -h was asked for: the usage is
// printed and the exit code is 0.
var errHelp = flag.ErrHelp

// exitError is an error with its exit code: 2 for bad usage or a refused
// configuration, 1 for a failure to read what the configuration names.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// usageError is a bad command line or configuration: exit code 2.
func usageError(err error) error { return exitError{code: 2, err: err} }

// parseFlags parses args into fs, which must not print anything itself: a
// parse error is returned as a usageError (the caller prints one short
// message), -h as errHelp after writing usage and fs's flags to out.
func parseFlags(fs *flag.FlagSet, args []string, usage string, out io.Writer) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(out, usage)
		fs.SetOutput(out)
		fs.PrintDefaults()
		return errHelp
	case err != nil:
		return usageError(err)
	}
	return nil
}

// newAgentFlags returns the agent's flag set over cfg, with -config.
func newAgentFlags(cfg *node.Config) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("atnode agent", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	path := fs.String("config", "", "YAML `file` of settings: keys are the flag names with '_' for '-'; flags given here win")
	return fs, path
}

// parseAgentConfig builds the agent's configuration: defaults, then the
// -config file, then the flags given on the command line. Parsing twice
// does that: the first pass finds -config, the second applies the explicit
// flags over the file's values (flags not given keep the file's value).
// Then it validates the result and reads the key and token files. Every
// error is an exitError, except errHelp.
func parseAgentConfig(args []string, stderr io.Writer) (node.Config, error) {
	cfg := node.DefaultConfig()
	fs, path := newAgentFlags(&cfg)
	if err := parseFlags(fs, args, agentUsage, stderr); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, usageError(fmt.Errorf("unexpected arguments %q (flags come before any argument; the agent takes none)", fs.Args()))
	}
	if *path != "" {
		cfg = node.DefaultConfig()
		if err := cfg.LoadYAML(*path); err != nil {
			return cfg, usageError(fmt.Errorf("-config: %w", err))
		}
		fs, _ = newAgentFlags(&cfg)
		if err := parseFlags(fs, args, agentUsage, io.Discard); err != nil { // cannot fail: the same arguments parsed once already
			return cfg, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError(err)
	}
	if err := checkFiles(cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// checkFiles reads the key and token files before anything starts, so that
// a bad one is said naming its flag: a file refused (bad contents, not a
// regular file, over 64 KiB) exits 2, a file that cannot be read exits 1.
func checkFiles(cfg node.Config) error {
	var errs []error
	code := 2
	file := func(flag string, err error, refused error) {
		if err == nil {
			return
		}
		if !errors.Is(err, refused) {
			code = 1
		}
		errs = append(errs, fmt.Errorf("-%s: %w", flag, err))
	}
	if cfg.Cluster.KeyFile != "" {
		_, err := cluster.LoadKeyFile(cfg.Cluster.KeyFile)
		file("secret-key-file", err, cluster.ErrKeyFile)
	}
	if cfg.HTTPTokenFile != "" {
		_, err := node.ReadTokenFile(cfg.HTTPTokenFile)
		file("http-token-file", err, node.ErrTokenFile)
	}
	if len(errs) == 0 {
		return nil
	}
	return exitError{code: code, err: errors.Join(errs...)}
}

// printErr writes err to w, one "atnode CMD: " line per joined error.
func printErr(w io.Writer, cmd string, err error) {
	for line := range strings.SplitSeq(err.Error(), "\n") {
		fmt.Fprintf(w, "atnode %s: %s\n", cmd, line)
	}
}

// oneLine is err's text on one line, for a log record: joined errors are
// separated by "; ".
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// parseExit returns the exit code for a failed parse of cmd's arguments:
// 0 when -h asked for the flags, else the error's code (2 unless it says
// otherwise) after saying what is wrong and where the usage is.
func (a app) parseExit(cmd string, err error) int {
	if errors.Is(err, errHelp) {
		return 0
	}
	printErr(a.stderr, cmd, err)
	code := 2
	if ee, ok := errors.AsType[exitError](err); ok {
		code = ee.code
	}
	if code == 2 {
		fmt.Fprintf(a.stderr, "atnode %s: run 'atnode %s -h' for usage\n", cmd, cmd)
	}
	return code
}

// agent runs "atnode agent" until ctx is cancelled.
func (a app) agent(ctx context.Context, args []string) int {
	// SIGHUP is subscribed to first: reading the configuration can take
	// seconds (a key file on a slow mount), and a rotation's SIGHUP then
	// would kill the agent (exit 129). One that comes before the start is
	// a reload once it is running.
	hangup := a.hangup
	if hangup == nil {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGHUP)
		defer signal.Stop(ch)
		hangup = ch
	}
	cfg, err := parseAgentConfig(args, a.stderr)
	if err != nil {
		return a.parseExit("agent", err)
	}
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: cfg.SlogLevel()}))

	n, err := a.newNode(cfg, logger, prometheus.NewRegistry())
	if err != nil {
		printErr(a.stderr, "agent", err)
		return 1
	}
	if err := n.Start(ctx); err != nil {
		printErr(a.stderr, "agent", err)
		if cerr := n.Close(); cerr != nil {
			logger.Error("close after a failed start", "err", oneLine(cerr))
		}
		return 1
	}
	// One line per listener, with the address actually bound (-http ""
	// runs without an HTTP listener).
	fmt.Fprintf(a.stdout, "gossip %s\n", n.GossipAddr())
	if addr := n.HTTPAddr(); addr != "" {
		fmt.Fprintf(a.stdout, "http %s\n", addr)
	}
	logger.Info("agent started", "name", cfg.Name, "gossip", n.GossipAddr(), "http", n.HTTPAddr(),
		"join", cfg.Cluster.Seeds.String(), "encrypted", cfg.Cluster.KeyFile != "")

	// A reload runs on its own goroutine, so that a key file stuck on a
	// hung mount delays neither the next signal nor the shutdown (which
	// does not wait for it). Hangups during a reload coalesce into one more.
	reloaded := make(chan error, 1)
	reloading, again := false, false
	reload := func() {
		reloading = true
		go func() { reloaded <- n.ReloadKeys() }()
	}
	for {
		select {
		case <-ctx.Done():
			logger.Info("leaving the cluster")
			// A leave that no peer confirmed (say, the whole cluster is
			// stopping at once) is still a clean stop: the node has left
			// and stopped serving, so the exit code stays 0.
			if err := n.Close(); err != nil {
				logger.Warn("shutdown incomplete", "err", oneLine(err))
			}
			logger.Info("stopped")
			return 0
		case <-hangup:
			switch {
			case cfg.Cluster.KeyFile == "":
				logger.Warn("SIGHUP: no -secret-key-file to reload")
			case reloading:
				again = true
			default:
				reload()
			}
		case err := <-reloaded:
			reloading = false
			if err != nil {
				logger.Error("SIGHUP: key file not reloaded; the keyring is unchanged", "file", cfg.Cluster.KeyFile, "err", oneLine(err))
			} else {
				logger.Info("SIGHUP: keys reloaded", "file", cfg.Cluster.KeyFile)
			}
			if again {
				again = false
				reload()
			}
		}
	}
}
