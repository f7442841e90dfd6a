// Package suggest finds the near miss a message offers ("did you mean").
package suggest

import "fmt"

// DidYouMean returns ` (did you mean "x"?)` for a near miss, else "".
func DidYouMean(got string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if l := commonPrefix(got, k); l >= 4 && l >= len(got)-2 {
			return fmt.Sprintf(" (did you mean %q?)", k)
		}
		if d := editDistance(got, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
