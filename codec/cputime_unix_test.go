//go:build unix

package codec

import "syscall"

// cpuNanos is the CPU time (user + system) this process has used. Beside
// wall-clock ns/op it gives a figure less distorted by a shared, loaded
// machine; benchmarks here run one goroutine and do not allocate.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
