package node

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HTTPServerConfig bounds what a client can hold of the HTTP server Start
// runs on Config.HTTP: how long a request may take to arrive and its
// response to leave, and how many connections may be open. An embedder
// that serves Node.Handler on its own server sets its own bounds. Start
// from DefaultHTTPServerConfig.
type HTTPServerConfig struct {
	// ReadHeaderTimeout is the most time a client has to send a request's
	// headers, from the start of the request. Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"http_read_header_timeout"`
	// ReadTimeout is the most time a client has to send a whole request,
	// headers and body, from its start: a connection that stalls mid-body
	// is closed once it passes. Default 30s.
	ReadTimeout time.Duration `yaml:"http_read_timeout"`
	// WriteTimeout is the most time a response may take, from the end of
	// the request's headers until its last byte is written (a client that
	// stops reading is cut off then). /debug/pprof/ requests that sample
	// for a while (profile, trace, seconds=N) get that time on top.
	// Default 30s.
	WriteTimeout time.Duration `yaml:"http_write_timeout"`
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request. Default 2m.
	IdleTimeout time.Duration `yaml:"http_idle_timeout"`
	// MaxConnections is the most connections open at once; a connection
	// beyond it is closed as soon as it is accepted, and counted in
	// atnode_http_connections_refused_total. Each costs a file
	// descriptor and a few KiB. Default 1024.
	MaxConnections int `yaml:"http_max_connections"`
}

// DefaultHTTPServerConfig returns the defaults documented on the fields.
func DefaultHTTPServerConfig() HTTPServerConfig {
	return HTTPServerConfig{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxConnections:    1024,
	}
}

// durationFlag is a duration field of an HTTPServerConfig with its flag.
type durationFlag struct {
	flag, usage string
	v           *time.Duration
}

// durations are c's duration fields with their flags, each named once for
// RegisterFlags and Validate.
func (c *HTTPServerConfig) durations() [4]durationFlag {
	return [...]durationFlag{
		{"http-read-header-timeout", "most time a client has to send a request's headers", &c.ReadHeaderTimeout},
		{"http-read-timeout", "most time a client has to send a whole request; a stalled body is cut off then", &c.ReadTimeout},
		{"http-write-timeout", "most time a response may take to be written", &c.WriteTimeout},
		{"http-idle-timeout", "how long a kept-alive connection may wait for its next request", &c.IdleTimeout},
	}
}

// RegisterFlags registers one flag per field on fs, with c's current values
// as defaults.
func (c *HTTPServerConfig) RegisterFlags(fs *flag.FlagSet) {
	for _, d := range c.durations() {
		fs.DurationVar(d.v, d.flag, *d.v, d.usage)
	}
	fs.IntVar(&c.MaxConnections, "http-max-connections", c.MaxConnections, "most HTTP connections open at once; more are closed at once")
}

// Validate reports every problem of c, each naming its flag, joined with
// errors.Join.
func (c HTTPServerConfig) Validate() error {
	var errs []error
	for _, d := range c.durations() {
		if *d.v <= 0 {
			errs = append(errs, fmt.Errorf("-%s: must be > 0, got %v", d.flag, *d.v))
		}
	}
	if c.MaxConnections < 1 {
		errs = append(errs, fmt.Errorf("-http-max-connections: must be >= 1, got %d", c.MaxConnections))
	}
	return errors.Join(errs...)
}

// connCounters are the listener's metrics: the connections open now and
// those refused over the cap.
type connCounters interface {
	opened(delta int)
	refused()
}

// server returns the HTTP server of h with c's bounds, serving through
// listen's listener. errLog receives the server's own errors.
func (c HTTPServerConfig) server(h http.Handler, errLog *log.Logger) *http.Server {
	var fresh freshConns
	srv := &http.Server{
		Handler:           c.deadlines(h),
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		// WriteTimeout is set per request by deadlines: the server's
		// would also make /debug/pprof/profile refuse to sample longer.
		IdleTimeout: c.IdleTimeout,
		ErrorLog:    errLog,
		ConnState:   fresh.track,
	}
	srv.RegisterOnShutdown(fresh.closeAll)
	return srv
}

// freshConns are the connections accepted whose first request's headers
// have not all arrived (net/http's StateNew: a connection leaves it when
// a request has been read, not at its first byte). Shutdown closes idle
// connections at once but waits for a fresh one for up to 5 s, as if a
// request were in flight on it (browsers open such connections ahead of
// need), so Close would wait out its grace period for nothing. closeAll,
// run by Shutdown once the listener is closed, closes them: no request on
// them has reached a handler (one whose headers were still arriving is
// cut, as http.Server.Shutdown alone does).
type freshConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// track is the server's ConnState hook.
func (f *freshConns) track(c net.Conn, st http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st != http.StateNew {
		delete(f.conns, c)
		return
	}
	if f.conns == nil {
		f.conns = make(map[net.Conn]struct{})
	}
	f.conns[c] = struct{}{}
}

// closeAll closes every fresh connection.
func (f *freshConns) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		_ = c.Close()
	}
	clear(f.conns)
}

// deadlines sets each request's write deadline, WriteTimeout from now, and
// gives a sampling /debug/pprof/ request its sampling time on top of both
// deadlines (the read deadline also ends the request's context).
func (c HTTPServerConfig) deadlines(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		rc := http.NewResponseController(w)
		extra := pprofSampling(r)
		_ = rc.SetWriteDeadline(now.Add(c.WriteTimeout + extra)) // not supported: no deadline to set
		if extra > 0 {
			_ = rc.SetReadDeadline(now.Add(c.ReadTimeout + extra))
		}
		h.ServeHTTP(w, r)
	})
}

// pprofSampling is how long a /debug/pprof/ request samples before it
// answers: seconds=N, 30 s for profile and 1 s for trace without it (the
// pprof package's defaults).
func pprofSampling(r *http.Request) time.Duration {
	name, ok := strings.CutPrefix(r.URL.Path, "/debug/pprof/")
	if !ok {
		return 0
	}
	sec := int64(0)
	switch name {
	case "profile":
		sec = 30
	case "trace":
		sec = 1
	}
	if v, err := strconv.ParseInt(r.URL.Query().Get("seconds"), 10, 64); err == nil && v > 0 {
		sec = min(v, int64(24*time.Hour/time.Second))
	}
	return time.Duration(sec) * time.Second
}

// listen wraps ln so that at most c.MaxConnections accepted connections
// are open at once: one beyond it is closed as soon as it is accepted, so
// that a flood of connections costs no file descriptors and cannot starve
// the rest of the process of them. m may be nil.
func (c HTTPServerConfig) listen(ln net.Listener, m connCounters) net.Listener {
	return &limitListener{Listener: ln, max: int64(c.MaxConnections), m: m}
}

type limitListener struct {
	net.Listener
	max  int64
	open atomic.Int64
	m    connCounters
}

// Accept returns the next connection under the cap; connections over it
// are closed and counted, and Accept goes on.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			if l.m != nil {
				l.m.refused() // before the close: a client told by the close reads the count
			}
			_ = c.Close()
			continue
		}
		if l.m != nil {
			l.m.opened(1)
		}
		return &limitConn{Conn: c, l: l}, nil
	}
}

// limitConn gives its place back when it is first closed.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		if c.l.m != nil {
			c.l.m.opened(-1)
		}
	})
	return err
}
