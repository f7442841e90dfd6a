package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// maxTrackedFile is the largest file the repository may hold: sources,
// documentation, test data and the docs' plots are all far below it; a
// build output is not.
const maxTrackedFile = 1 << 20

// git runs git in the repository and returns its standard output.
func git(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = root(t)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out)
}

// inCheckout skips the test when the tree is not a git checkout (a module
// downloaded from the proxy, a source archive): there is no index to check.
func inCheckout(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	cmd := exec.Command("git", "rev-parse", "--is-inside-work-tree")
	cmd.Dir = root(t)
	if out, err := cmd.Output(); err != nil || strings.TrimSpace(string(out)) != "true" {
		t.Skip("not a git checkout")
	}
}

// TestTreeHoldsSourcesOnly: `git ls-files` holds no compiled executable
// (ELF, Mach-O, PE or WebAssembly, whatever its mode), no file with the
// executable bit that is not a script (#!), and no file over 1 MB. A 21 MB
// x86-64 binary was once committed at the root, most of every clone.
func TestTreeHoldsSourcesOnly(t *testing.T) {
	inCheckout(t)
	var paths, modes, objects []string
	for rec := range strings.SplitSeq(strings.TrimSuffix(git(t, "", "ls-files", "-s", "-z"), "\x00"), "\x00") {
		// <mode> <object> <stage>\t<path>
		meta, path, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 {
			t.Fatalf("git ls-files -s: cannot read %q", rec)
		}
		if f[0] == "160000" { // a submodule: no blob
			continue
		}
		paths, modes, objects = append(paths, path), append(modes, f[0]), append(objects, f[1])
	}
	if len(paths) == 0 {
		t.Fatal("git ls-files lists nothing")
	}
	// One git cat-file --batch for every blob: "<object> blob <size>\n",
	// the content, "\n".
	out := []byte(git(t, strings.Join(objects, "\n")+"\n", "cat-file", "--batch"))
	for i, path := range paths {
		header, rest, ok := bytes.Cut(out, []byte("\n"))
		f := strings.Fields(string(header))
		if !ok || len(f) != 3 || f[0] != objects[i] {
			t.Fatalf("git cat-file --batch: %q for %s", header, path)
		}
		size, err := strconv.Atoi(f[2])
		if err != nil || size+1 > len(rest) {
			t.Fatalf("git cat-file --batch: %q for %s", header, path)
		}
		content := rest[:size]
		out = rest[size+1:]
		if size > maxTrackedFile {
			t.Errorf("%s is %d bytes, over %d: a build output or a data set, not a source", path, size, maxTrackedFile)
		}
		if kind := executableKind(content); kind != "" {
			t.Errorf("%s is a compiled executable (%s): build outputs are ignored, never committed", path, kind)
		} else if modes[i] == "100755" && !bytes.HasPrefix(content, []byte("#!")) {
			t.Errorf("%s has the executable bit but is no script (#!)", path)
		}
	}
}

// executableKind names the executable format b starts with, or "".
func executableKind(b []byte) string {
	for _, m := range []struct {
		magic, kind string
	}{
		{"\x7fELF", "ELF"},
		{"\xfe\xed\xfa\xce", "Mach-O"}, {"\xfe\xed\xfa\xcf", "Mach-O"},
		{"\xce\xfa\xed\xfe", "Mach-O"}, {"\xcf\xfa\xed\xfe", "Mach-O"},
		{"\xca\xfe\xba\xbe", "Mach-O universal"},
		{"MZ", "PE"},
		{"\x00asm", "WebAssembly"},
	} {
		if bytes.HasPrefix(b, []byte(m.magic)) {
			return m.kind
		}
	}
	return ""
}

func TestExecutableKind(t *testing.T) {
	for _, tc := range []struct {
		head, want string
	}{
		{"\x7fELF\x02\x01\x01", "ELF"},
		{"\xcf\xfa\xed\xfe\x0c", "Mach-O"},
		{"MZ\x90\x00", "PE"},
		{"\x00asm\x01", "WebAssembly"},
		{"#!/usr/bin/env bash\n", ""},
		{"package e2e\n", ""},
		{"", ""},
	} {
		if got := executableKind([]byte(tc.head)); got != tc.want {
			t.Errorf("executableKind(%q) = %q, want %q", tc.head, got, tc.want)
		}
	}
}

// TestBuildOutputsAreIgnored: what `go build` writes for every main package
// of the repository (the binary named after its directory, at the root or
// in that directory) and what make writes (bin/, build/, .tools/,
// .aws-sam/, bench/out/) is ignored by git, so that no build output can be
// committed by accident. A new function or command is covered by adding its
// name to .gitignore.
func TestBuildOutputsAreIgnored(t *testing.T) {
	inCheckout(t)
	outputs := []string{
		"bin/edgelimit", "build/arm64/tts/bootstrap", ".tools/bin/aws-lambda-rie",
		".aws-sam/build/TTSFunction/bootstrap", "bench/out/edgelimit-bench", "x.test", "cpu.out",
	}
	for _, module := range []string{".", "bench"} {
		cmd := exec.Command(goTool(), "list", "-f", `{{if eq .Name "main"}}{{.Dir}}{{end}}`, "./...")
		cmd.Dir = filepath.Join(root(t), module)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", module, err)
		}
		for dir := range strings.FieldsSeq(string(out)) {
			rel, err := filepath.Rel(root(t), dir)
			if err != nil {
				t.Fatal(err)
			}
			// go build in the module's root writes <module>/<name>
			// (unless that is the package's own directory), go build in
			// the package's directory <dir>/<name>.
			name := filepath.Base(dir)
			if atModule := filepath.Join(module, name); atModule != rel {
				outputs = append(outputs, filepath.ToSlash(atModule))
			}
			outputs = append(outputs, filepath.ToSlash(filepath.Join(rel, name)))
		}
	}
	slices.Sort(outputs)
	outputs = slices.Compact(outputs)
	// --no-index: judge the path by .gitignore alone, whether or not a
	// file of that name exists or is tracked.
	ignored := map[string]bool{}
	cmd := exec.Command("git", "check-ignore", "--no-index", "--stdin")
	cmd.Dir = root(t)
	cmd.Stdin = strings.NewReader(strings.Join(outputs, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil && cmd.ProcessState.ExitCode() != 1 { // 1: none is ignored
		t.Fatalf("git check-ignore: %v", err)
	}
	for p := range strings.FieldsSeq(string(out)) {
		ignored[p] = true
	}
	for _, p := range outputs {
		if !ignored[p] {
			t.Errorf("%s, a build output, is not ignored: add it to .gitignore", p)
		}
	}
}

// TestStaticcheckIsPinnedApart: `make test` runs staticcheck (its lint
// target, before the tests), at the version internal/tools/staticcheck's
// go.mod pins, and the module's own go.mod names no analysis tool: a `tool`
// line there would put staticcheck's requirements (golang.org/x/tools and
// more) into the module graph of every module that imports ours.
func TestStaticcheckIsPinnedApart(t *testing.T) {
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root(t), name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tools := read("internal/tools/staticcheck/go.mod")
	if !strings.Contains(tools, "\ntool honnef.co/go/tools/cmd/staticcheck\n") || !regexp.MustCompile(`honnef\.co/go/tools v\d+\.\d+\.\d+`).MatchString(tools) {
		t.Errorf("internal/tools/staticcheck/go.mod does not pin staticcheck as a tool:\n%s", tools)
	}
	if mod := read("go.mod"); strings.Contains(mod, "honnef.co") || strings.Contains(mod, "\ntool ") {
		t.Errorf("go.mod names a tool or staticcheck; importers would inherit its requirements")
	}
	mk := read("Makefile")
	if !strings.Contains(mk, "-modfile=internal/tools/staticcheck/go.mod staticcheck") {
		t.Error("the Makefile does not run the pinned staticcheck")
	}
	if m := regexp.MustCompile(`(?m)^test:(.*)$`).FindStringSubmatch(mk); m == nil || !slices.Contains(strings.Fields(m[1]), "lint") {
		t.Errorf("make test does not depend on lint (staticcheck): %q", m)
	}
}

// TestCodeCitesOnlyTheRepository: code and configuration cite no document
// outside the repository (there were citations of a design document's
// sections, which no reader had), and each citation of
// ARCHITECTURE.md ("ARCHITECTURE.md, Data model") names one of its
// sections.
func TestCodeCitesOnlyTheRepository(t *testing.T) {
	inCheckout(t)
	arch, err := os.ReadFile(filepath.Join(root(t), "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	var sections []string
	for line := range strings.Lines(string(arch)) {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			sections = append(sections, strings.TrimSpace(h))
		}
	}
	cite := regexp.MustCompile(`ARCHITECTURE\.md, ([A-Z][a-z' ]*[a-z])`)
	outside := regexp.MustCompile(`DESIGN(\.md)? ?§|DESIGN\.md`)
	files := strings.Split(strings.TrimSpace(git(t, "", "ls-files", "*.go", "*.yaml", "*.yml", "*.mk", "Makefile", "*.js", "*.html")), "\n")
	if len(files) < 100 {
		t.Fatalf("git ls-files lists %d code files", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root(t), f))
		if err != nil {
			t.Fatal(err)
		}
		// Comments wrap: join the lines of a citation.
		text := regexp.MustCompile(`\n\s*(//|#)\s*`).ReplaceAllString(string(b), " ")
		if m := outside.FindString(text); m != "" {
			t.Errorf("%s cites %q, a document outside the repository", f, m)
		}
		for _, m := range cite.FindAllStringSubmatch(text, -1) {
			if !slices.ContainsFunc(sections, func(s string) bool { return strings.HasPrefix(s, m[1]) }) {
				t.Errorf("%s cites %q, which is no section of ARCHITECTURE.md (%q)", f, m[0], sections)
			}
		}
	}
}
