package policy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/edgelimit/edgelimit/policy"
)

// jsonFiles returns the example functions' policy files rewritten in JSON.
func jsonFiles(t testing.TB) map[string][]byte {
	files, err := filepath.Glob(filepath.Join("..", "functions", "handlers", "policies", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example policy files: %v", err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil {
			t.Fatal(err)
		}
		j, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = j
	}
	return out
}

// TestDecodeJSONIsDecode: a policy file in JSON reads the same through
// DecodeJSON as through the YAML parser: the same tree, so the same
// policies and the same messages at the same lines.
func TestDecodeJSONIsDecode(t *testing.T) {
	for name, j := range jsonFiles(t) {
		want, err := policy.Decode(name, j)
		if err != nil {
			t.Fatal(err)
		}
		got, err := policy.DecodeJSON(name, j)
		if err != nil {
			t.Fatalf("%s: DecodeJSON: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: DecodeJSON's tree is not Decode's", name)
		}
		a, errA := policy.Parse(name, j)
		b, errB := policy.ParseTree(name, got)
		if errA != nil || errB != nil {
			if errA == nil || errB == nil || errA.Error() != errB.Error() {
				t.Errorf("%s: Parse: %v; ParseTree(DecodeJSON): %v", name, errA, errB)
			}
		} else if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: Parse %v, ParseTree(DecodeJSON) %v, or the files differ", name, errA, errB)
		}
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"{\n\"version\": 1,\n\"policies\": [\n}", "x.json:4: not valid JSON"},
		{"{\"version\": 1}\n{}", "x.json:2: more than one JSON value"},
		{"{\n\"version\": 1,\n\"policies\": [", "x.json:3: not valid JSON: the file ends inside a value"},
		{strings.Repeat("[", 100) + strings.Repeat("]", 100), "nested deeper than 64 levels"},
		{"", "file is empty"},
		{"{\"version\": 1.5, \"policies\": []}", "version \"1.5\" must be a whole number"},
	} {
		_, err := policy.DecodeJSON("x.json", []byte(tt.in))
		if err == nil {
			_, err = policy.ParseTree("x.json", mustDecodeJSON(t, tt.in))
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want it to contain %q", tt.in, err, tt.want)
		}
	}
}

func mustDecodeJSON(t *testing.T, s string) *policy.Node {
	n, err := policy.DecodeJSON("x.json", []byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// FuzzDecodeJSON: DecodeJSON never panics, and a file that both it and
// the YAML parser accept is the same policy file through either.
func FuzzDecodeJSON(f *testing.F) {
	for _, j := range jsonFiles(f) {
		f.Add(j)
	}
	f.Add([]byte(`{"version": 1, "policies": [{"name": "a", "limit": 1e3}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tree, err := policy.DecodeJSON("f", data)
		if err != nil {
			return
		}
		got, err := policy.ParseTree("f", tree)
		if err != nil {
			return
		}
		want, err := policy.Parse("f", data)
		if err != nil {
			return // YAML reads some JSON differently (1.1's quirks); the JSON reading stands
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: DecodeJSON's policies are not the YAML parser's", data)
		}
	})
}
