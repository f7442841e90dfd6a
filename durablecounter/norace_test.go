//go:build !race

package durablecounter_test

const raceEnabled = false
