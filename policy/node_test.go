package policy

import (
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzYAMLInt: an !!int scalar reads as the YAML library decodes it, now
// that the parser works on Node trees (which hold no decoded values).
func FuzzYAMLInt(f *testing.F) {
	for _, s := range []string{"10", "-3", "+7", "0x1F", "0o17", "017", "0b101", "-0b11", "1_000", "9223372036854775807", "9223372036854775808", "18446744073709551615", "1e3", "0", "-0x8000000000000000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var n yaml.Node
		if yaml.Unmarshal([]byte("v: "+s), &n) != nil || len(n.Content) != 1 || len(n.Content[0].Content) != 2 {
			return
		}
		v := n.Content[0].Content[1]
		if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
			return
		}
		var want int64
		wantErr := v.Decode(&want)
		got, err := yamlInt(v.Value)
		if (err != nil) != (wantErr != nil) || (err == nil && got != want) {
			t.Errorf("%q: yamlInt = %d, %v; the YAML library: %d, %v", v.Value, got, err, want, wantErr)
		}
	})
}
