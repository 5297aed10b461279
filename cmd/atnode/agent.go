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

Flags:
`

// errHelp is returned by parseAgentConfig when -h was asked for: the usage
// is printed and the exit code is 0.
var errHelp = flag.ErrHelp

// usageError is a bad command line or configuration: exit code 2.
// printed is true when the flag package has already reported it.
type usageError struct {
	err     error
	printed bool
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// newAgentFlags returns the agent's flag set over cfg, with -config.
func newAgentFlags(cfg *node.Config, out io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("atnode agent", flag.ContinueOnError)
	fs.SetOutput(out)
	cfg.RegisterFlags(fs)
	path := fs.String("config", "", "YAML `file` of settings: keys are the flag names with '_' for '-'; flags given here win")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), agentUsage)
		fs.PrintDefaults()
	}
	return fs, path
}

// parseAgentConfig builds the agent's configuration: defaults, then the
// -config file, then the flags given on the command line. Parsing twice
// does that: the first pass finds -config, the second applies the explicit
// flags over the file's values (flags not given keep the file's value).
// Every error is a usageError, except errHelp.
func parseAgentConfig(args []string, stderr io.Writer) (node.Config, error) {
	cfg := node.DefaultConfig()
	fs, path := newAgentFlags(&cfg, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, errHelp
		}
		return cfg, usageError{err: err, printed: true}
	}
	if fs.NArg() > 0 {
		return cfg, usageError{err: fmt.Errorf("unexpected arguments %q (flags come before any argument; the agent takes none)", fs.Args())}
	}
	if *path != "" {
		cfg = node.DefaultConfig()
		if err := cfg.LoadYAML(*path); err != nil {
			return cfg, usageError{err: fmt.Errorf("-config: %w", err)}
		}
		fs, _ = newAgentFlags(&cfg, io.Discard)
		if err := fs.Parse(args); err != nil { // cannot fail: the same arguments parsed once already
			return cfg, usageError{err: err}
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError{err: err}
	}
	if err := cfg.CheckExposure(); err != nil {
		return cfg, usageError{err: err}
	}
	if err := checkFiles(cfg); err != nil {
		return cfg, usageError{err: err}
	}
	return cfg, nil
}

// checkFiles reads the key and token files before anything starts, so that
// a bad one is a configuration error naming its flag.
func checkFiles(cfg node.Config) error {
	var errs []error
	if cfg.SecretKeyFile != "" {
		if _, err := cluster.LoadKeyFile(cfg.SecretKeyFile); err != nil {
			errs = append(errs, fmt.Errorf("-secret-key-file: %w", err))
		}
	}
	if cfg.HTTPTokenFile != "" {
		b, err := os.ReadFile(cfg.HTTPTokenFile)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("-http-token-file: %w", err))
		case strings.TrimSpace(string(b)) == "":
			errs = append(errs, fmt.Errorf("-http-token-file: %s is empty", cfg.HTTPTokenFile))
		}
	}
	return errors.Join(errs...)
}

// printErr writes err to w, one "atnode CMD: " line per joined error.
func printErr(w io.Writer, cmd string, err error) {
	for line := range strings.SplitSeq(err.Error(), "\n") {
		fmt.Fprintf(w, "atnode %s: %s\n", cmd, line)
	}
}

// parseExit returns the exit code for a failed parse of cmd's arguments:
// 0 when -h asked for the flags, else 2 after saying what is wrong (once).
func (a app) parseExit(cmd string, err error) int {
	if errors.Is(err, errHelp) {
		return 0
	}
	if ue, ok := errors.AsType[usageError](err); ok && ue.printed {
		return 2
	}
	printErr(a.stderr, cmd, err)
	fmt.Fprintf(a.stderr, "atnode %s: run \"atnode %s -h\" for the flags\n", cmd, cmd)
	return 2
}

// agent runs "atnode agent" until ctx is cancelled.
func (a app) agent(ctx context.Context, args []string) int {
	cfg, err := parseAgentConfig(args, a.stderr)
	if err != nil {
		return a.parseExit("agent", err)
	}
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: cfg.SlogLevel()}))

	hangup := a.hangup
	if hangup == nil {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGHUP)
		defer signal.Stop(ch)
		hangup = ch
	}

	n, err := a.newNode(cfg, logger, prometheus.NewRegistry())
	if err != nil {
		printErr(a.stderr, "agent", err)
		return 1
	}
	if err := n.Start(ctx); err != nil {
		printErr(a.stderr, "agent", err)
		if cerr := n.Close(); cerr != nil {
			logger.Error("close after a failed start", "err", cerr)
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
		"join", cfg.Join.String(), "encrypted", cfg.SecretKeyFile != "")

	for {
		select {
		case <-ctx.Done():
			logger.Info("leaving the cluster")
			// A leave that no peer confirmed (say, the whole cluster is
			// stopping at once) is still a clean stop: the node has left
			// and stopped serving, so the exit code stays 0.
			if err := n.Close(); err != nil {
				logger.Warn("shutdown incomplete", "err", err)
			}
			logger.Info("stopped")
			return 0
		case <-hangup:
			if cfg.SecretKeyFile == "" {
				logger.Warn("SIGHUP: no -secret-key-file to reload")
				continue
			}
			if err := n.ReloadKeys(); err != nil {
				logger.Error("SIGHUP: key file not reloaded; the keyring is unchanged", "file", cfg.SecretKeyFile, "err", err)
				continue
			}
			logger.Info("SIGHUP: keys reloaded", "file", cfg.SecretKeyFile)
		}
	}
}
