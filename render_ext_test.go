package edgelimit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/internal/jsonenc"
)

// decoderExtensions is appendExtensions as it was before its compact fast
// path: every extension through encoding/json's decoder.
func decoderExtensions(b []byte, exts []string) []byte {
	seen := append([]string(nil), problemMembers...)
	for _, ext := range exts {
		dec := json.NewDecoder(strings.NewReader(ext))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			continue
		}
		for dec.More() {
			tok, err := dec.Token()
			name, ok := tok.(string)
			if err != nil || !ok {
				break
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				break
			}
			dup := false
			for _, s := range seen {
				dup = dup || s == name
			}
			if dup {
				continue
			}
			seen = append(seen, name)
			b = append(b, ',')
			b = jsonenc.AppendString(b, name)
			b = append(b, ':')
			var c bytes.Buffer
			if json.Compact(&c, raw) == nil {
				b = append(b, c.Bytes()...)
			} else {
				b = append(b, raw...)
			}
		}
	}
	return b
}

var extensionSeeds = []string{
	`{"ban":{"policy":"paid-daily","until":"2026-12-02T06:15:00Z","level":2}}`,
	`{"challenge":{"challenge":"v1.abc","bits":8},"type":"not-replaced"}`,
	`{"challenge": {"challenge":"v1.abc","bits":8}, "type": "not-replaced"}`,
	`{"a":1,"b":[1,{"c":"}"}],"d":"x\"y","e":true,"f":null,"g":-1.5e3}`,
	`{"a<b":"<&>","\u0061":2}`, `{}`, `[]`, `{"a":1,}`, `{"a":1`, `"x"`, ``, `{"a":{"b":[]},"a":2}`,
	`{"status":1,"x":{"y":"\\"}}`,
}

// FuzzExtensionsAsTheDecoder: the compact fast path writes what the
// decoder did, for any extension (two in a row, so that members repeated
// across them are skipped alike).
func FuzzExtensionsAsTheDecoder(f *testing.F) {
	for _, s := range extensionSeeds {
		f.Add(s, `{"ban":1}`)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		exts := []string{a, b}
		want := decoderExtensions(nil, exts)
		if got := appendExtensions(nil, exts); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s, want %s", exts, got, want)
		}
		// Split once beforehand (as banResponse does), the same bytes.
		var rs []*Response
		for _, ext := range exts {
			r := &Response{Extension: ext}
			if ms, ok := compactMembers(ext, nil); ok {
				r.members = ms
			}
			rs = append(rs, r)
		}
		p := &problemBody{Type: problemQuotaExceeded, Title: titleQuotaExceeded, Status: 429}
		whole := appendProblem(nil, p, nil, nil)
		wantBody := append(append(whole[:len(whole)-1:len(whole)-1], want...), '}')
		if got := appendProblem(nil, p, nil, rs); !bytes.Equal(got, wantBody) {
			t.Fatalf("%q split beforehand: got %s, want %s", exts, got, wantBody)
		}
	})
}

func BenchmarkExtensions(b *testing.B) {
	exts := []string{extensionSeeds[0]}
	buf := make([]byte, 0, 512)
	b.Run("compact", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = appendExtensions(buf[:0], exts)
		}
	})
	b.Run("decoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = decoderExtensions(buf[:0], exts)
		}
	})
}
