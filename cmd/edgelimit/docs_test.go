package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/policy"
)

// yamlBlock is a fenced YAML code block of a Markdown file.
var yamlBlock = regexp.MustCompile("(?s)```ya?ml\n(.*?)```")

// TestDocsPolicyBlocksParse parses every policy file and policy excerpt the
// README and docs/ show, with every strategy this program links, so that no
// example a user copies is refused by the parser it documents. An excerpt
// (a list of policies without the file's head) is parsed under
// "version: 1\npolicies:".
func TestDocsPolicyBlocksParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "..", "README.md"))
	blocks := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range yamlBlock.FindAllSubmatchIndex(data, -1) {
			block := string(data[m[2]:m[3]])
			line := strings.Count(string(data[:m[2]]), "\n") + 1
			switch {
			case strings.Contains(block, "\npolicies:") || strings.HasPrefix(block, "policies:"):
			case strings.HasPrefix(strings.TrimLeft(block, " "), "- name:"):
				block = "version: 1\npolicies:\n" + block
			default:
				continue
			}
			blocks++
			if _, err := policy.Parse(filepath.Base(f), []byte(block)); err != nil {
				t.Errorf("%s:%d: the policies shown do not parse:\n%v", f, line, err)
			}
		}
	}
	if blocks < 5 {
		t.Fatalf("found %d policy blocks in the README and docs; the pattern must have stopped matching", blocks)
	}
}
