package main

// Pricing assumed by the cost model: Amazon DynamoDB on-demand capacity,
// Standard table class, US East (N. Virginia), list prices in USD as
// published since the on-demand price reduction of 1 November 2024. Change
// them here (and rerun `edgelimit-bench report`) for another region.
const (
	pricePerMillionWRU = 0.625 // USD per million write request units
	pricePerMillionRRU = 0.125 // USD per million read request units
)

// CostRow is one strategy's DynamoDB cost per million decisions.
type CostRow struct {
	Name string
	// Source says where the unit counts come from.
	Source string
	// Units per decision, allowed and denied.
	WRUAllowed, RRUAllowed float64
	WRUDenied, RRUDenied   float64
	// HasDenied: denials were measured.
	HasDenied bool
	// CallsAllowed and CallsDenied are store calls per decision.
	CallsAllowed, CallsDenied float64
}

// usd returns the cost of a million decisions of wru and rru units each.
func usd(wru, rru float64) float64 {
	return wru*pricePerMillionWRU + rru*pricePerMillionRRU
}

// unitsPer divides a snapshot's units and calls by n decisions.
func unitsPer(s Snapshot, n int64) (wru, rru, calls float64) {
	if n == 0 {
		return 0, 0, 0
	}
	return s.WRU / float64(n), s.RRU / float64(n), float64(s.Total()) / float64(n)
}
