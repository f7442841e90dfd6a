package middleware

import (
	"strings"
	"testing"
)

// TestHeaderLookup: header maps are matched case-insensitively whatever the
// case of the map's keys and of the name, including names too long or not
// ASCII for the allocation-free path.
func TestHeaderLookup(t *testing.T) {
	long := "X-" + strings.Repeat("Long", 20)
	single := mapHeaders{"x-api-key": "a", "Content-TYPE": "b", strings.ToLower(long): "c", "x-é": "d"}
	multi := multiMapHeaders{"x-api-key": {"a"}, "Content-TYPE": {"b"}, strings.ToLower(long): {"c"}, "x-é": {"d"},
		"x-two": {"1", "2"}}
	for _, tt := range []struct{ name, want string }{
		{"X-Api-Key", "a"},
		{"x-api-key", "a"},
		{"content-type", "b"},
		{"Content-Type", "b"},
		{long, "c"},
		{"X-É", "d"},
		{"Missing", ""},
	} {
		if got := single.Get(tt.name); got != tt.want {
			t.Errorf("MapHeaders.Get(%q) = %q, want %q", tt.name, got, tt.want)
		}
		if got := multi.Get(tt.name); got != tt.want {
			t.Errorf("MultiMapHeaders.Get(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := multi.Get("X-Two"); got != "1, 2" {
		t.Errorf(`MultiMapHeaders.Get("X-Two") = %q, want "1, 2"`, got)
	}
}
