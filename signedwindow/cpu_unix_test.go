//go:build unix

package signedwindow

import (
	"syscall"
	"testing"
)

// cpuTime starts measuring the process's CPU time (user + system, all
// threads); the returned func reports it as cpu-ns/op. On a shared machine
// wall-clock ns/op swings with other load; CPU time mostly does not.
func cpuTime(b *testing.B) func() {
	start := rusage()
	return func() {
		b.ReportMetric(float64(rusage()-start)/float64(b.N), "cpu-ns/op")
	}
}

func rusage() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
