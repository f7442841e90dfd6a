//go:build !unix

package middleware_test

import "time"

func cpuTime() (time.Duration, bool) { return 0, false }
