// Package powgate puts a proof of work between a soft threshold and the
// hard limit of a durable or kv policy.
package powgate
