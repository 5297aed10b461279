package timeouthttp

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// TestNestedTransports: an outer Transport's timeout that ends a request
// going through an inner Transport (whose caller's context it ends with
// ErrTimeout) is the inner one's caller's: the inner Policy observes it as
// Canceled, not as a timeout of its own at its own, longer, timeout. So
// whether or not the inner attempt could become a probe, or is hedged.
func TestNestedTransports(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inner Options
	}{
		{"plain", Options{Policy: policy("h", time.Second)}},
		{"probeable", Options{Policy: probing1s()}},
		{"hedged", Options{Policy: hedger(time.Second), Hedge: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				outer := policy("h", 50*time.Millisecond)
				tc.inner.Base = &slowBase{delay: time.Hour}
				in := newTransport(t, tc.inner)
				out := newTransport(t, Options{Base: in, Policy: outer})
				req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
				require.NoError(t, err)
				_, err = out.RoundTrip(req)
				require.ErrorIs(t, err, ErrTimeout)
				synctest.Wait()
				require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 50 * time.Millisecond}}, outer.Observed())
				inner := tc.inner.Policy.(interface{ Observed() []obs }).Observed()
				require.NotEmpty(t, inner)
				for _, o := range inner {
					require.Equal(t, timeout.Canceled, o.Outcome, "%+v", o)
				}
			})
		})
	}
}

// probing1s returns a Policy with a 1 s timeout to "h" and a probe of 1 min
// on offer.
func probing1s() timeout.Policy {
	p := policy("h", time.Second)
	p.OfferProbe(time.Minute)
	return p
}
