package handlers

import (
	"strings"
	"testing"
)

// FuzzContainsFold checks the deliberately naive scan against the standard
// library on ASCII-folded text.
func FuzzContainsFold(f *testing.F) {
	f.Add("Walnut Lamp - made for daily use", "lamp")
	f.Add("aaab", "aab")
	f.Add("", "")
	f.Add("x", "")
	f.Add("ÉCLAIR", "é")
	f.Fuzz(func(t *testing.T, hay, needle string) {
		needle = strings.ToLower(needle)
		want := strings.Contains(asciiLower(hay), needle)
		if got := containsFold([]byte(hay), []byte(needle)); got != want {
			t.Fatalf("containsFold(%q, %q) = %v, want %v", hay, needle, got, want)
		}
	})
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func TestMatchRoute(t *testing.T) {
	split := func(s string) []string { return strings.Split(strings.Trim(s, "/"), "/") }
	for _, tc := range []struct {
		route, path string
		want        bool
	}{
		{"/paid/{resource}", "/paid/x", true},
		{"/paid/{resource}", "/paid/", false},
		{"/paid/{resource}", "/paid/x/y", false},
		{"/files/{path+}", "/files/a/b/c", true},
		{"/files/{path+}", "/files", false},
		{"/search", "/search", true},
		{"/search", "/search/x", false},
		{"/search", "/", false},
	} {
		if got := matchRoute(split(tc.route), split(tc.path)); got != tc.want {
			t.Errorf("matchRoute(%s, %s) = %v, want %v", tc.route, tc.path, got, tc.want)
		}
	}
}

func BenchmarkNewCorpus(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		NewCorpus(DefaultSearchRecords, 1)
	}
}

// BenchmarkSearch is the CPU one /search request costs on the default
// corpus (the flood experiment's unit of work).
func BenchmarkSearch(b *testing.B) {
	c := NewCorpus(DefaultSearchRecords, 1)
	b.SetBytes(int64(c.Size()))
	b.ReportAllocs()
	for b.Loop() {
		c.Search("walnut lamp", DefaultSearchLimit)
	}
}
