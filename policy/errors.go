package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Error is a problem in a policy file, pointing at the line.
type Error struct {
	File   string
	Line   int
	Policy string // empty for file-level problems
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Policy != "" {
		fmt.Fprintf(&b, "policy %q: ", e.Policy)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrBadFile is what every error of Parse is (errors.Is).
var ErrBadFile = errors.New("policy: bad policy file")

// Errors is every problem Parse found in a file, in line
// order. Its message is one problem per line, each naming the file and the
// line; errors.Is(err, ErrBadFile) reports true.
type Errors []*Error

func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Is reports whether target is ErrBadFile.
func (es Errors) Is(target error) bool { return target == ErrBadFile }

// Unwrap returns the problems, for errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
