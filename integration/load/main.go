// Command load measures the HTTP sidecar on one core: it starts a node
// (gossip off) in a child process with GOMAXPROCS=1, pinned to CPU 0 when
// taskset is available, and drives it from this process with keep-alive
// connections: POST /v1/record with 1 and 1000 samples, GET /v1/timeout
// with 1 and 3 destinations, each for -duration, reporting throughput and
// latency percentiles. Run it pinned to another core:
//
//	taskset -c 1 go run ./integration/load -duration 20s
//
// It is a measurement, not a test: nothing runs it in CI.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/node"
)

func main() {
	serve := flag.String("serve", "", "internal: serve a node's HTTP API on this `address` until killed")
	duration := flag.Duration("duration", 20*time.Second, "how long each scenario runs")
	conns := flag.Int("conns", 8, "concurrent keep-alive connections")
	only := flag.String("only", "", "run only the scenarios whose name contains this")
	profile := flag.String("profile", "", "write the server's CPU profile of each scenario to `prefix`-<scenario>.pprof")
	flag.Parse()
	if *serve != "" {
		if err := runServer(*serve); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := run(*duration, *conns, *only, *profile); err != nil {
		log.Fatal(err)
	}
}

// runServer serves a lone node's API on addr until interrupted.
func runServer(addr string) error {
	cfg := node.DefaultConfig()
	cfg.Name, cfg.DisableGossip, cfg.HTTP = "load", true, addr
	n, err := node.New(cfg, nil, nil)
	if err != nil {
		return err
	}
	if err := n.Start(context.Background()); err != nil {
		return err
	}
	fmt.Println(n.HTTPAddr())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt)
	<-ch
	return n.Close()
}

// scenario is one kind of request, sent over and over.
type scenario struct {
	name   string
	method string
	path   string
	body   []byte
}

func run(duration time.Duration, conns int, only, profile string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{self, "-serve", addr}
	if p, err := exec.LookPath("taskset"); err == nil {
		args = append([]string{p, "-c", "0"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	line := make([]byte, 64)
	k, err := out.Read(line)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	base := "http://" + strings.TrimSpace(string(line[:k]))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
	// Samples for the timeout scenarios, so that they decide on estimates.
	for range 20 {
		if err := send(client, scenario{method: "POST", path: "/v1/record", body: testutil.RecordBody(1000)}, base); err != nil {
			return err
		}
	}
	scenarios := []scenario{
		{name: "record 1 sample", method: "POST", path: "/v1/record", body: testutil.RecordBody(1)},
		{name: "record 1000 samples", method: "POST", path: "/v1/record", body: testutil.RecordBody(1000)},
		{name: "timeout 1 dest", method: "GET", path: "/v1/timeout?dest=db-1"},
		{name: "timeout 3 dests", method: "GET", path: "/v1/timeout?dest=db-1&dest=db-2&dest=db-3"},
	}
	fmt.Printf("%-20s %10s %10s %10s %10s  (%d connections, %v each, server GOMAXPROCS=1)\n", "scenario", "req/s", "p50", "p99", "p99.9", conns, duration)
	for _, s := range scenarios {
		if only != "" && !strings.Contains(s.name, only) {
			continue
		}
		var prof sync.WaitGroup
		if profile != "" && duration >= 2*time.Second {
			prof.Go(func() {
				secs := int((duration - time.Second) / time.Second)
				resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs))
				if err != nil {
					log.Print(err)
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				_ = os.WriteFile(profile+"-"+strings.ReplaceAll(s.name, " ", "-")+".pprof", b, 0o644)
			})
		}
		lat, err := load(client, base, s, conns, duration)
		prof.Wait()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		slices.Sort(lat)
		pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		fmt.Printf("%-20s %10.0f %10v %10v %10v\n", s.name, float64(len(lat))/duration.Seconds(), pct(0.5), pct(0.99), pct(0.999))
	}
	return nil
}

// load sends s from conns goroutines for d and returns every latency.
func load(client *http.Client, base string, s scenario, conns int, d time.Duration) ([]time.Duration, error) {
	var mu sync.Mutex
	var all []time.Duration
	var first error
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			var lat []time.Duration
			for time.Now().Before(end) {
				t0 := time.Now()
				if err := send(client, s, base); err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
					return
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(all) == 0 && first == nil {
		first = errors.New("no request completed")
	}
	return all, first
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// send makes one request and reads the whole answer.
func send(client *http.Client, s scenario, base string) error {
	var body io.Reader
	if s.body != nil {
		body = bytes.NewReader(s.body)
	}
	req, err := http.NewRequest(s.method, base+s.path, body)
	if err != nil {
		return err
	}
	if s.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return err
}
