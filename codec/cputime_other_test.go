//go:build !unix

package codec

// cpuNanos is not measured on this platform; the metric then reads 0.
func cpuNanos() int64 { return 0 }
