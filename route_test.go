package edgelimit_test

import (
	"testing"

	"github.com/edgelimit/edgelimit"
)

func TestTemplatePath(t *testing.T) {
	tests := map[string]string{
		"POST /contact":        "/contact",
		"GET /paid/{resource}": "/paid/{resource}",
		"ANY /{proxy+}":        "/{proxy+}",
		"/paid/{resource}":     "/paid/{resource}",
		"$default":             "",
		"":                     "",
		"GET relative":         "",
		"GET /double//{x}/":    "/double/{x}",
	}
	for in, want := range tests {
		if got := edgelimit.TemplatePath(in); got != want {
			t.Errorf("TemplatePath(%q) = %q, want %q", in, got, want)
		}
	}
}
