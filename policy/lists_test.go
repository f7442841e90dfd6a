package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/policy"
)

func TestListsParseErrors(t *testing.T) {
	for _, tc := range []struct{ lists, want string }{
		{`lists: {a: b}`, "`lists` must be a list"},
		{"lists:\n  - just-a-string", "must be a mapping"},
		{"lists:\n  - {action: deny, values: [10.0.0.0/8]}", "list has no `name`"},
		{"lists:\n  - {name: Bad_Name, action: deny, values: [10.0.0.0/8]}", "must be 1-64 characters"},
		{"lists:\n  - {name: a, action: deny, values: [10.0.0.0/8]}\n  - {name: a, action: allow, values: [10.0.0.0/8]}", `list name "a" is used twice`},
		{"lists:\n  - {name: a, values: [10.0.0.0/8]}", "missing `action`"},
		{"lists:\n  - {name: a, action: block, values: [10.0.0.0/8]}", `action "block" is not one of allow, deny`},
		{"lists:\n  - {name: a, action: deny, valuse: [10.0.0.0/8]}", `unknown field "valuse"`},
		{"lists:\n  - {name: a, action: deny, values: [10.0.0.0/33]}", `"10.0.0.0/33" is not a CIDR`},
		{"lists:\n  - {name: a, action: deny, values: [10.0.0.300]}", "is not an address or a CIDR"},
		{"lists:\n  - {name: a, action: deny}", "no values, file or env"},
		{"lists:\n  - {name: a, action: deny, match: global, values: [x]}", "match global would match every request"},
		{"lists:\n  - {name: a, action: deny, match: cookie:x, values: [x]}", "match:"},
		{"lists:\n  - {name: a, action: deny, match: header:X-K, trusted_proxies: 1, values: [x]}", "trusted_proxies must be 0 to 16, for a list that matches ip"},
		{"lists:\n  - {name: a, action: deny, routes: [\"FETCH\"], values: [10.0.0.0/8]}", "route"},
	} {
		file := "version: 1\n" + tc.lists + "\npolicies:\n  - {name: p, routes: [\"GET /*\"], key: ip, strategy: durable, limit: 1, window: 1m}\n"
		_, err := policy.Parse("t.yaml", []byte(file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s\nerror %v, want %q", tc.lists, err, tc.want)
		}
		if err != nil && !errors.Is(err, policy.ErrBadFile) {
			t.Errorf("%s: %v is not ErrBadFile", tc.lists, err)
		}
	}
}
