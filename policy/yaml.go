//go:build !edgelimit.noyaml

package policy

// The YAML reader: everything in the package that calls the YAML library.
// Built with -tags edgelimit.noyaml (the example functions are), the
// package holds none of it, so a program does not even run the library's
// package init (276 allocations at every cold start); such a program
// validates trees (ParseTree) it holds or reads in JSON (DecodeJSON).

import (
	"bytes"
	"errors"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

// Load reads and validates a policy file.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err // an *fs.PathError: it names the file and what failed
	}
	return Parse(path, data)
}

// Parse parses and validates a policy file. name is used in messages.
// All problems are reported together, as Errors.
func Parse(name string, data []byte) (*File, error) {
	doc, err := Decode(name, data)
	if err != nil {
		return nil, err
	}
	return ParseTree(name, doc)
}

// Decode reads a policy file's tree from its YAML, without validating it
// (ParseTree does): a file that is not YAML, is larger than 1 MiB, or
// holds more than one document is an Errors naming the line.
func Decode(name string, data []byte) (*Node, error) {
	p := &fileParser{file: name}
	if len(data) > maxFileSize {
		p.errorf(0, "", "file is %d bytes, larger than the %d allowed", len(data), maxFileSize)
		return nil, p.err()
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		line, msg := syntaxError(data, err)
		p.errorf(line, "", "not valid YAML: %s", msg)
		return nil, p.err()
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errorf(extra.Line, "", "more than one YAML document; put all policies in one")
		return nil, p.err()
	}
	return fromYAML(&doc), nil
}

// fromYAML copies the YAML library's tree into a Node tree.
func fromYAML(y *yaml.Node) *Node {
	n := &Node{Kind: Kind(y.Kind), Tag: y.Tag, Value: y.Value, Line: y.Line}
	if len(y.Content) > 0 {
		n.Content = make([]*Node, len(y.Content))
		for i, c := range y.Content {
			n.Content[i] = fromYAML(c)
		}
	}
	return n
}
