package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/edgelimit/edgelimit"
)

func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: edgelimit check FILE\n\nValidates a policy file and prints which policies guard which routes.")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	f, err := edgelimit.LoadPolicies(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	printTable(stdout, f)
	return 0
}

// printTable writes the routes -> policies table, one row per route of each
// policy, in file order.
func printTable(w io.Writer, f *edgelimit.PolicyFile) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tPOLICY\tSTRATEGY\tALGORITHM\tLIMIT\tWINDOW\tBURST\tKEY\tON STORE ERROR\tNOTES")
	for _, p := range f.Policies {
		burst := "-"
		if p.Burst > 0 {
			burst = strconv.FormatInt(p.Burst, 10)
		}
		var notes string
		if p.Shadow {
			notes += "shadow "
		}
		if p.Cost > 1 {
			notes += "cost=" + strconv.FormatInt(p.Cost, 10) + " "
		}
		if p.ProofOfWork != nil {
			notes += fmt.Sprintf("pow=%dbits/%s ", p.ProofOfWork.Bits, edgelimit.FormatDuration(p.ProofOfWork.TTL))
		}
		if p.Shards > 1 {
			notes += "shards=" + strconv.Itoa(p.Shards) + " "
		}
		if p.OnMissingKey == edgelimit.MissingKeyIP {
			notes += "missing-key->ip "
		}
		if p.TrustedProxies > 0 {
			notes += "trusted_proxies=" + strconv.Itoa(p.TrustedProxies) + " "
		}
		for _, r := range p.Routes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r, p.Name, p.Strategy, p.Algorithm, p.Limit,
				edgelimit.FormatDuration(p.Window), burst, p.Key, p.OnStoreError, notes)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "%s: %s OK\n", f.Source, countOf(len(f.Policies), "policy", "policies"))
}

func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
