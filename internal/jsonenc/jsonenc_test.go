package jsonenc

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzAppendString checks that any string, valid UTF-8 or not, is
// written as one JSON string that decodes to what encoding/json makes of it.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "GET /paid/*", "a\"b\\c", "\x00\x1f\x7f", "\xff\xfe", "é\u2028\u2029", "\t\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := AppendString(nil, s)
		if strings.ContainsAny(string(b), "\n\r") {
			t.Fatalf("AppendString(%q) = %s contains a raw line break", s, b)
		}
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("AppendString(%q) = %s is not a JSON string: %v", s, b, err)
		}
		want := strings.ToValidUTF8(s, "\ufffd")
		if !utf8.ValidString(s) {
			// encoding/json replaces each invalid byte, ToValidUTF8 each run.
			wb, _ := json.Marshal(s)
			_ = json.Unmarshal(wb, &want)
		}
		if got != want {
			t.Fatalf("AppendString(%q) decodes to %q, want %q", s, got, want)
		}
		if wb, _ := json.Marshal(s); string(wb) != string(b) {
			t.Fatalf("AppendString(%q) = %s, encoding/json writes %s", s, b, wb)
		}
	})
}
