package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adaptivetimeout/adaptivetimeout/node"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// runtime is the part of a running node that atnode uses. *node.Node
// provides it through nodeRuntime; tests may substitute a fake.
type runtime interface {
	Start(ctx context.Context) error
	Close() error
	GossipAddr() string
	HTTPAddr() string
	ReloadKeys() error
	Handler() http.Handler
	Record(dest string, latency time.Duration)
	Estimate(dest string, q float64) (tracker.Estimate, error)
	Timeout(dests []string, attempt int) (decision, error)
}

// decision is the part of a node's timeout decision the demo prints.
type decision struct {
	Timeout   time.Duration
	DecidedBy string // the deciding destination, "" when the backoff fallback decided
	Source    string // that destination's estimate source
	Fallback  bool
	Guarded   bool // the local guard decided: this node's own quantile, above the fleet's
}

// newNodeFunc builds a node; run uses newRuntime (realruntime.go).
type newNodeFunc func(cfg node.Config, logger *slog.Logger, reg prometheus.Registerer) (runtime, error)
