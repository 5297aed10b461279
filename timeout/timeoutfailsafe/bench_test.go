package timeoutfailsafe

import (
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
)

// BenchmarkRun compares a failsafe-go execution around a function that does
// nothing: with no policy, with failsafe-go's own fixed timeout (the naive
// alternative) and with the adaptive one (over a Policy that costs nothing,
// so the adapter's own cost shows).
func BenchmarkRun(b *testing.B) {
	fn := func() error { return nil }
	for _, bc := range []struct {
		name string
		exec failsafe.Executor[any]
	}{
		{"bare", failsafe.With[any]()},
		{"fixed", failsafe.With(fstimeout.New[any](time.Second))},
		{"timeoutfailsafe", failsafe.With(New[any](policytest.Fixed(time.Second), "db-1"))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.exec.Run(fn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
