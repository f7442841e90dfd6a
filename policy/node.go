package policy

// Node is one node of a policy file's syntax tree: what the parser
// validates, whatever the file was written in. Decode reads it from YAML
// (the policy file's format); DecodeJSON from JSON, which is YAML too; and
// GoSource writes it as Go, so that a program whose policy file is fixed at
// build time holds the tree itself and links no YAML parser (the example
// functions do: functions/handlers' generated trees). ParseTree validates
// a tree exactly as Parse validates the file it came from, with the same
// messages at the same lines.
type Node struct {
	Kind Kind
	// Tag is a scalar's resolved type: !!str, !!int, !!float, !!bool or
	// !!null (YAML's core schema).
	Tag string
	// Value is a scalar's text (a key's name, a field's value).
	Value string
	// Line is where the node starts in the file, from 1.
	Line int
	// Content: a document's one node, a sequence's items, a mapping's keys
	// and values in turn.
	Content []*Node
}

// Kind is a Node's kind; the values are the YAML library's.
type Kind uint32

// The kinds of Node.
const (
	DocumentNode Kind = 1 << iota
	SequenceNode
	MappingNode
	ScalarNode
	AliasNode
)

// ParseTree validates a policy file's tree (Decode's, DecodeJSON's, or a
// generated one). name is used in messages. All problems are reported
// together, as Errors.
func ParseTree(name string, doc *Node) (*File, error) {
	p := &fileParser{file: name}
	if doc == nil {
		doc = &Node{}
	}
	f := p.parseFile(doc)
	if err := p.err(); err != nil {
		return nil, err
	}
	return f, nil
}

// Clone returns a deep copy of n, to edit without changing n.
func (n *Node) Clone() *Node {
	if n == nil {
		return nil
	}
	c := *n
	if n.Content != nil {
		c.Content = make([]*Node, len(n.Content))
		for i, k := range n.Content {
			c.Content[i] = k.Clone()
		}
	}
	return &c
}
