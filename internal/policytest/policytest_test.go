package policytest

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

var (
	_ timeout.Policy = Fixed(0)
	_ timeout.Policy = (*Policy)(nil)
)

func TestFixed(t *testing.T) {
	a := Fixed(time.Second).Decide("db-1", 0, time.Time{})
	require.Equal(t, timeout.Attempt{Dest: "db-1", Attempt: 1, Timeout: time.Second}, a)
	require.False(t, Fixed(time.Second).Probe(&a, time.Time{}))
	require.False(t, a.Probe)
}

func TestPolicy(t *testing.T) {
	var now time.Time
	p := New(10 * time.Millisecond)
	p.SetTimeout("db-1", 100*time.Millisecond)
	require.Equal(t, timeout.Attempt{Dest: "db-1", Attempt: 3, Timeout: 400 * time.Millisecond},
		p.Decide("db-1", 3, now))
	require.Equal(t, timeout.Attempt{Dest: "x", Attempt: 1, Timeout: 10 * time.Millisecond, Reason: timeout.ReasonFallback},
		p.Decide("x", 0, now))

	p.OfferProbe(time.Second)
	a := p.Decide("db-1", 1, now)
	require.Equal(t, time.Second, a.ProbeTimeout)
	require.True(t, p.Probe(&a, now))
	require.True(t, a.Probe)
	require.True(t, p.InFlight("db-1"))
	require.Zero(t, p.Decide("db-1", 1, now).ProbeTimeout, "the offer is used up")
	b := p.Decide("db-1", 1, now)
	require.False(t, p.Probe(&b, now))

	p.Observe(a, timeout.Completed, 500*time.Millisecond, now)
	p.Observe(b, timeout.TimedOut, 100*time.Millisecond, now)
	require.False(t, p.InFlight("db-1"))
	require.Equal(t, []Observation{
		{Dest: "db-1", Attempt: 1, Outcome: timeout.Completed, Elapsed: 500 * time.Millisecond, Probe: true},
		{Dest: "db-1", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond},
	}, p.Observed())
	require.Equal(t, []timeout.Outcome{timeout.Completed, timeout.TimedOut}, p.Outcomes())
	require.Equal(t, 1, p.Probes())
	require.Equal(t, 5, p.Decided())
}

func TestSeq(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		seq := &Seq{Delays: []time.Duration{time.Second, time.Millisecond}}
		start := time.Now()
		i, err := seq.Call(t.Context())
		require.NoError(t, err)
		require.Equal(t, 0, i)
		require.Equal(t, time.Second, time.Since(start))
		ctx, cancel := context.WithCancelCause(t.Context())
		cancel(errors.New("gone"))
		i, err = seq.Call(ctx)
		require.Equal(t, 1, i)
		require.ErrorIs(t, err, context.Canceled)
		start = time.Now()
		_, err = seq.Call(t.Context()) // beyond Delays: the last one
		require.NoError(t, err)
		require.Equal(t, time.Millisecond, time.Since(start))
		causes := seq.Causes()
		require.Len(t, causes, 3)
		require.NoError(t, causes[0])
		require.EqualError(t, causes[1], "gone")
		require.NoError(t, causes[2])
	})
}
