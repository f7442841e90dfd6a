package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Exit codes, the same for every subcommand.
const (
	exitOK      = 0 // done, or the help a user asked for (-h)
	exitFailure = 1 // the command could not do it: a bad policy file, a store that failed
	exitUsage   = 2 // the command line is wrong: an unknown flag, a missing argument, a bad value
)

// cmdline is one subcommand's command line: its name as the user types it,
// its usage text and its flags. Flags may come before, between or after
// the positional arguments (grant POLICY KEY 50 --for 24h, get URL -o
// FILE); "--" ends the flags; a word that is a negative number is an
// argument, not a flag, so that a bad value gets its own message (grant
// POLICY KEY -5).
type cmdline struct {
	name  string // "grant", "override set"
	usage string // synopsis and description, ending in a newline
	fs    *flag.FlagSet
}

func newCmdline(name, usage string) *cmdline {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse reports its errors itself
	return &cmdline{name: name, usage: usage, fs: fs}
}

// parse parses args. ok is false when the command must stop with code: 0
// after -h (the usage printed on stdout), 2 after a bad flag (the error and
// the usage on stderr).
func (c *cmdline) parse(args []string, stdout, stderr io.Writer) (positional []string, code int, ok bool) {
	flags, positional := c.split(args)
	if err := c.fs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.printUsage(stdout)
			return nil, exitOK, false
		}
		return nil, c.usageError(stderr, "%v", err), false
	}
	return positional, exitOK, true
}

// split separates flags (with their values) from positional arguments.
func (c *cmdline) split(args []string) (flags, positional []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return flags, append(positional, args[i+1:]...)
		case len(a) < 2 || a[0] != '-' || isNumber(a):
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := c.fs.Lookup(name); f != nil && !isBoolFlag(f) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, positional
}

// isNumber reports whether s is a number like -5 or -1.5.
func isNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	_, err := strconv.ParseFloat(s, 64)
	return err == nil && s != "" && s[0] >= '0' && s[0] <= '9'
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// set reports whether the flag was given on the command line.
func (c *cmdline) set(name string) bool {
	found := false
	c.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

func (c *cmdline) printUsage(w io.Writer) {
	fmt.Fprint(w, c.usage)
	n := 0
	c.fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nFlags:")
	c.fs.SetOutput(w)
	c.fs.PrintDefaults()
	c.fs.SetOutput(io.Discard)
}

// usageError reports a wrong command line on stderr: one line naming the
// problem, one saying where the usage is. It returns 2.
func (c *cmdline) usageError(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "edgelimit %s: %s\nRun 'edgelimit %s -h' for its usage.\n", c.name, fmt.Sprintf(format, args...), strings.Fields(c.name)[0])
	return exitUsage
}

// fail reports a command that could not do its work: one line on stderr.
// It returns 1.
func (c *cmdline) fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "edgelimit %s: %s\n", strings.Fields(c.name)[0], strings.TrimPrefix(err.Error(), "edgelimit: "))
	return exitFailure
}
