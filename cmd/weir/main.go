// Command weir is weir's one binary. Each subcommand lives in its own file
// and registers itself from an init function:
//
//	func init() {
//		register(command{Name: "exec", Summary: "...", Run: runExec})
//	}
//
// A subcommand parses its own flags with newFlags and returns an error;
// main prints it as one line "weir: ..." on stderr, followed by its detail
// indented when the error carries some on further lines (the compiler's
// output of a failed build), and exits non-zero (2 for usage errors, 1
// otherwise).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/internal/spell"
)

// command is one subcommand.
type command struct {
	Name    string // as typed: weir NAME
	Summary string // one line for `weir help`
	// Run executes the command with the arguments after its name.
	Run func(ctx context.Context, std Stdio, args []string) error
}

// Stdio is a command's standard streams. run hands commands an Out and Err
// that are safe for concurrent use (each Write is atomic), so a command may
// print from several goroutines.
type Stdio struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// commands is the table of subcommands, filled by register from init
// functions and read-only afterwards.
var commands = map[string]command{}

// register adds a subcommand; call it from an init function.
func register(c command) {
	if _, dup := commands[c.Name]; dup {
		panic("weir: command registered twice: " + c.Name)
	}
	commands[c.Name] = c
}

// UsageError is a command-line mistake; weir exits with status 2.
type UsageError struct{ Msg string }

// Error returns the one-line message.
func (e *UsageError) Error() string { return e.Msg }

// usagef returns a *UsageError.
func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// newFlags returns a FlagSet for a subcommand that reports parse errors as
// errors (never exits) and prints its help to std.Err.
func newFlags(std Stdio, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("weir "+name, flag.ContinueOnError)
	fs.SetOutput(std.Err)
	fs.Usage = func() {
		fmt.Fprintf(std.Err, "usage: weir %s %s\n\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs, turning a flag error into a one-line
// *UsageError that says how to list the command's flags, and -h into
// flag.ErrHelp once the command's help is printed. (flag itself prints
// the whole help after any mistake, burying the line that says what it
// was.)
func parseFlags(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	}
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		// A typo'd flag: name the likely one, as for commands.
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if c := spell.Closest(strings.TrimPrefix(name, "-"), names); c != "" {
			return usagef("%s: %v: did you mean -%s? (run '%s -h' for its flags)", strings.TrimPrefix(fs.Name(), "weir "), err, c, fs.Name())
		}
	}
	return usagef("%s: %v (run '%s -h' for its flags)", strings.TrimPrefix(fs.Name(), "weir "), err, fs.Name())
}

func main() {
	// SIGHUP too: a terminal that closes under weir up or a worker (a
	// dropped ssh session) stops it as Ctrl-C does — releasing the
	// coordinator's lease, a worker saying goodbye — not at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := run(ctx, os.Args[1:], Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}

// didYouMean returns "did you mean X? " for the name of names that word
// most likely misspells or is another tool's word for, else "".
func didYouMean(word string, names []string) string {
	other := map[string]string{"list": "ls", "lst": "ls", "remove": "rm", "delete": "rm", "del": "rm", "info": "status", "show": "status"}[word]
	if other != "" && slices.Contains(names, other) {
		return "did you mean " + other + "? "
	}
	if c := spell.Closest(word, names); c != "" {
		return "did you mean " + c + "? "
	}
	return ""
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, args []string, std Stdio) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printHelp(std.Err)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	std.Out, std.Err = &lockedWriter{w: std.Out}, &lockedWriter{w: std.Err}
	c, ok := commands[args[0]]
	if !ok {
		meant := didYouMean(args[0], slices.Collect(maps.Keys(commands)))
		if one, ok := strings.CutSuffix(args[0], "s"); ok && slices.Contains([]string{"job", "module", "checkpoint", "worker"}, one) {
			meant = "did you mean " + one + " ls? " // the commands that list what they name
		}
		fmt.Fprintf(std.Err, "weir: unknown command %q (%srun 'weir help')\n", args[0], meant)
		return 2
	}
	err := c.Run(ctx, std, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	}
	var specErrs jobspec.Errors
	if errors.As(err, &specErrs) {
		// A job spec with several problems: one line for each.
		for _, e := range specErrs {
			printErr(std.Err, e)
		}
		return 1
	}
	printErr(std.Err, err)
	var ue *UsageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// printErr writes err to w as "weir: " and its first line, then each
// further non-empty line of its message indented: what a tool said about
// the failure (the go command's compile errors) is kept, and the error
// itself still reads as one line.
func printErr(w io.Writer, err error) {
	first, rest, _ := strings.Cut(err.Error(), "\n")
	fmt.Fprintf(w, "weir: %s\n", first)
	for line := range strings.SplitSeq(rest, "\n") {
		if line = strings.TrimRight(line, " \t\r"); line != "" {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "weir runs stream operators compiled to WebAssembly.")
	fmt.Fprintln(w, "\nusage: weir COMMAND [flags] [args]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintln(w, "\nrun 'weir COMMAND -h' for a command's flags")
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
