//go:build !edgelimit.noyaml

package policy

import (
	"bytes"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxLocateLines bounds the files whose syntax errors are located by
// re-parsing prefixes; longer ones keep the YAML library's line.
const maxLocateLines = 2000

// syntaxError returns the line and a one-line message for err, the YAML
// library's error for data. The library reports some errors at the line
// where the enclosing block or flow collection starts, counted from 0 (an
// unclosed [ on line 4 as "line 3"), so the line is found again: it is the
// first line from which every prefix of the file fails to parse, which is
// where the file stops being YAML whatever follows. A prefix that fails only
// because it cuts a construct short (a list continued on the next line)
// parses again once the construct is complete, so it does not count.
func syntaxError(data []byte, err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	// "line N: " (the regexp ^line (\d+): , by hand: no regexp compiled
	// at every cold start's package init).
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		n, i := 0, 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			n, i = n*10+int(rest[i]-'0'), i+1
		}
		if i > 0 && strings.HasPrefix(rest[i:], ": ") {
			msg, line = rest[i+2:], n
		}
	}
	if strings.Contains(msg, "tab character") {
		msg += " (indent with spaces)"
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxLocateLines {
		return line, msg
	}
	first, end := 0, 0
	for k := range lines {
		end += len(lines[k])
		var n yaml.Node
		if yaml.Unmarshal(data[:end], &n) == nil {
			first = 0
		} else if first == 0 {
			first = k + 1
		}
	}
	if first > 0 {
		line = first
	}
	return line, msg
}
