package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// maxJSONDepth bounds the nesting of a JSON policy file (a real one nests
// four deep).
const maxJSONDepth = 64

// DecodeJSON reads a policy file written in JSON into its tree, with the
// tags and lines Decode gives the same text (JSON is YAML), without a YAML
// parser: a program that holds its own policy file's tree (GoSource's)
// and reads a replacement file in JSON links none. A file that is not one
// JSON value, or is larger than 1 MiB, is an Errors naming the line.
func DecodeJSON(name string, data []byte) (*Node, error) {
	p := &fileParser{file: name}
	if len(data) > maxFileSize {
		p.errorf(0, "", "file is %d bytes, larger than the %d allowed", len(data), maxFileSize)
		return nil, p.err()
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return &Node{}, nil
	}
	d := &jsonDecoder{dec: json.NewDecoder(bytes.NewReader(data)), data: data}
	d.dec.UseNumber()
	root, err := d.value(0)
	if err == nil {
		if _, err2 := d.dec.Token(); !errors.Is(err2, io.EOF) {
			p.errorf(d.line(d.dec.InputOffset()), "", "more than one JSON value; put all policies in one object")
			return nil, p.err()
		}
	}
	if err != nil {
		line := d.line(d.dec.InputOffset())
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line = d.line(se.Offset + 1) // Offset bytes were read before the bad one
		}
		msg := strings.TrimPrefix(err.Error(), "json: ")
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			msg = "the file ends inside a value"
		}
		if c := bytes.TrimSpace(data)[0]; c != '{' && c != '[' {
			msg += " (this program reads policy files in JSON, which is YAML too: write the file in JSON)"
		}
		p.errorf(line, "", "not valid JSON: %s", msg)
		return nil, p.err()
	}
	return &Node{Kind: DocumentNode, Line: root.Line, Content: []*Node{root}}, nil
}

type jsonDecoder struct {
	dec  *json.Decoder
	data []byte
}

// line is the line of the byte at offset (the last of the token just read).
func (d *jsonDecoder) line(offset int64) int {
	offset = min(max(offset-1, 0), int64(len(d.data)))
	return 1 + bytes.Count(d.data[:offset], []byte("\n"))
}

var errJSONDepth = errors.New("nested deeper than 64 levels")

func (d *jsonDecoder) value(depth int) (*Node, error) {
	tok, err := d.dec.Token()
	if err != nil {
		return nil, err
	}
	return d.node(tok, depth)
}

func (d *jsonDecoder) node(tok json.Token, depth int) (*Node, error) {
	line := d.line(d.dec.InputOffset())
	switch t := tok.(type) {
	case json.Delim:
		if depth >= maxJSONDepth {
			return nil, errJSONDepth
		}
		n := &Node{Kind: SequenceNode, Tag: "!!seq", Line: line, Content: []*Node{}}
		if t == '{' {
			n.Kind, n.Tag = MappingNode, "!!map"
		}
		for d.dec.More() {
			c, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, c)
			if n.Kind == MappingNode {
				v, err := d.value(depth + 1)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, v)
			}
		}
		if _, err := d.dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		if len(n.Content) == 0 {
			n.Content = nil
		}
		return n, nil
	case string:
		return &Node{Kind: ScalarNode, Tag: "!!str", Value: t, Line: line}, nil
	case json.Number:
		tag := "!!float"
		s := string(t)
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			tag = "!!int"
		} else if _, err := strconv.ParseUint(s, 10, 64); err == nil {
			tag = "!!int"
		}
		return &Node{Kind: ScalarNode, Tag: tag, Value: s, Line: line}, nil
	case bool:
		return &Node{Kind: ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t), Line: line}, nil
	default: // nil
		return &Node{Kind: ScalarNode, Tag: "!!null", Value: "null", Line: line}, nil
	}
}
