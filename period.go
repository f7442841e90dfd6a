package edgelimit

import "errors"

// errPeriodOverride refuses an override whose window is a calendar period:
// the override store keeps a duration. An override that sets only a limit
// keeps the policy's (or the tier's) period, which is the usual case: a
// customer's larger monthly quota.
var errPeriodOverride = errors.New("edgelimit: an override's window is a duration; set only its limit to keep the policy's calendar period (window: month)")
