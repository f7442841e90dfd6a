//go:build !race

package edgelimit_test

const raceEnabled = false
