package metrics_test

import (
	"os"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/metrics"
)

// An EMF observer goes into edgelimit.Config.Observe; here it is called by
// hand with one denial to show the line CloudWatch Logs turns into metrics.
func ExampleEMF() {
	m, err := metrics.NewEMF(metrics.EMFConfig{
		Writer:   os.Stdout,
		Function: "contact",
		Now:      func() time.Time { return time.Unix(1_700_000_000, 0) },
	})
	if err != nil {
		panic(err)
	}
	m.Observe(edgelimit.Event{Route: "POST /contact", Policy: "contact", Strategy: "kv", Latency: 420 * time.Microsecond})
	// Output:
	// {"_aws":{"Timestamp":1700000000000,"CloudWatchMetrics":[{"Namespace":"edgelimit","Dimensions":[["Policy","Route"]],"Metrics":[{"Name":"Allowed","Unit":"Count"},{"Name":"Denied","Unit":"Count"},{"Name":"ShadowDenied","Unit":"Count"},{"Name":"Degraded","Unit":"Count"},{"Name":"StoreErrors","Unit":"Count"},{"Name":"Refunded","Unit":"Count"},{"Name":"RefundFailed","Unit":"Count"},{"Name":"OverrideErrors","Unit":"Count"},{"Name":"StoreLatency","Unit":"Milliseconds"}]}]},"Policy":"contact","Route":"POST /contact","Function":"contact","Strategy":"kv","Allowed":0,"Denied":1,"ShadowDenied":0,"Degraded":0,"StoreErrors":0,"Refunded":0,"RefundFailed":0,"OverrideErrors":0,"StoreLatency":0.42}
}
