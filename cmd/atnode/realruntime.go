package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adaptivetimeout/adaptivetimeout/node"
)

// nodeRuntime adapts *node.Node to runtime.
type nodeRuntime struct{ *node.Node }

// Timeout is node.Node.Timeout with the fields the demo prints.
func (r nodeRuntime) Timeout(dests []string, attempt int) (decision, error) {
	d, err := r.Node.Timeout(dests, attempt)
	return decision{Timeout: d.Timeout, DecidedBy: d.DecidedBy, Source: d.Source.String(), Fallback: d.Fallback, Guarded: d.Guarded}, err
}

// newRuntime builds the real node.
func newRuntime(cfg node.Config, logger *slog.Logger, reg prometheus.Registerer) (runtime, error) {
	n, err := node.New(cfg, logger, reg)
	if err != nil {
		return nil, err
	}
	return nodeRuntime{n}, nil
}
