//go:build race

package edgelimit_test

const raceEnabled = true
