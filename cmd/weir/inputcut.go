package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/jobspec"
)

// fromLineUsage is the -from-line flag of weir run and weir input.
const fromLineUsage = "publish the first input file from its line N on, skipping the lines before it (1: all of it): " +
	"what an interrupted publish says to give, so that the rest goes out without the part the stream holds already; the files after it are published whole"

// inputCut is the error of an input whose publish an interrupt (Ctrl-C)
// cut short: the stream acknowledged the records before line next, and
// resume says how to publish the rest. A trial's Ctrl-C said only
// "weir: -input big.txt: context canceled", and the same command run
// again published all 300 000 lines again after the 42 184 the stream
// held already.
type inputCut struct {
	as     string // the flag or command: "-input" or "input"
	in     string // the input as given: FILE or SOURCE=FILE
	index  int    // its place among the inputs
	stream string
	from   int // its -from-line (0: none)
	acked  int // records of it the stream acknowledged
	next   int // the first line not known to be stored
	// total is how many records the input holds from its from line on;
	// -1 where that is not known (standard input, a pipe).
	total int
	// rest are the inputs not published at all, in the order they are
	// published, after this one.
	rest []string
	// resume says how to publish the rest: "; publish the rest with: …",
	// or why there is nothing to do; set by the command.
	resume string
	err    error
}

func (c *inputCut) Error() string {
	of := plural(c.acked, "record")
	if c.total >= 0 {
		of = fmt.Sprintf("%d of its %s", c.acked, plural(c.total, "record"))
		if c.from > 1 {
			of += fmt.Sprintf(" from line %d", c.from)
		}
	}
	return fmt.Sprintf("%s %s: interrupted: %s published (acknowledged by stream %s), those before line %d%s",
		c.as, c.in, of, c.stream, c.next, c.resume)
}

func (c *inputCut) Unwrap() error { return c.err }

// rest returns the inputs of c, the one cut first and then those not
// published, for the command that publishes the rest with -from-line.
func (c *inputCut) inputs() []string {
	return append([]string{c.in}, c.rest...)
}

// cutWait bounds the wait, after an interrupt, for the acknowledgements
// of what is in flight, so that the count the interrupt prints is what the
// stream holds.
const cutWait = 5 * time.Second

// countRecords returns how many records (lines that are not empty) file
// holds from line from on (0: all), or -1 where it cannot tell without
// taking them from another reader: standard input, a pipe.
func countRecords(file string, from int) int {
	if file == "-" {
		return -1
	}
	st, err := os.Stat(file)
	if err != nil || !st.Mode().IsRegular() {
		return -1
	}
	f, err := os.Open(file)
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxInputLine)
	n, line := 0, 0
	for sc.Scan() {
		if line++; line >= from && len(sc.Bytes()) > 0 {
			n++
		}
	}
	if sc.Err() != nil {
		return -1
	}
	return n
}

// cutInputs returns the inputs of inputs published after the one at i:
// those after it that only takes (nil: all), then later (those published
// after these, weir run's unbounded sources' before the submit).
func cutInputs(spec *jobspec.Spec, inputs inputFlags, i int, only func(jobspec.Source) bool, later []string) []string {
	var rest []string
	for _, in := range inputs[i+1:] {
		if src, _ := inputSource(spec, in); src != nil && (only == nil || only(*src)) {
			rest = append(rest, in)
		}
	}
	return append(rest, later...)
}

// quoteAll returns args shell-quoted, joined by spaces.
func quoteAll(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// heldInput is what a stream a -input publishes to held before, on the
// subjects of a source that reads it from the start: the job reads it too.
type heldInput struct {
	source, stream string
	n              int
}

// heldBefore returns, for each JetStream source an -input of o publishes
// to and that reads its stream from the start, how many messages the
// stream holds on its subjects before weir run publishes: a stream keeps
// what an earlier run (or an interrupted one) published, and the job
// reads it along with the input (a trial summed up 300 000 records in of a
// job that read 342 184).
func heldBefore(ctx context.Context, js jetstream.JetStream, spec *jobspec.Spec, inputs inputFlags) []heldInput {
	var held []heldInput
	seen := map[string]bool{}
	for _, in := range inputs {
		src, _ := inputSource(spec, in)
		if src == nil || src.Kind != jobspec.KindJetStream || src.Start != "" || src.StartSequence != 0 || seen[src.Name] {
			continue
		}
		seen[src.Name] = true
		cctx, cancel := context.WithTimeout(ctx, summaryWait)
		n, err := countSubject(cctx, js, src.Stream, sourceSubject(*src))
		cancel()
		if err == nil && n > 0 {
			held = append(held, heldInput{src.Name, src.Stream, n})
		}
	}
	return held
}

// countSubject counts the messages stream holds on subjects (a filter).
func countSubject(ctx context.Context, js jetstream.JetStream, stream, subjects string) (int, error) {
	cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		FilterSubjects:    []string{subjects},
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute, // removed by the server if the delete below fails
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := cons.CachedInfo().NumPending
	_ = js.DeleteConsumer(context.WithoutCancel(ctx), stream, cons.CachedInfo().Name)
	return int(n), nil
}

// inWords says the records in of weir run's summary: those published,
// and what the fed streams held before for the job to read with them.
func inWords(published int, held []heldInput) string {
	if len(held) == 0 {
		return plural(published, "record") + " in"
	}
	total := published
	parts := []string{fmt.Sprintf("%d published by -input", published)}
	for _, h := range held {
		total += h.n
		parts = append(parts, fmt.Sprintf("%d stream %s held before for source %s", h.n, h.stream, h.source))
	}
	return fmt.Sprintf("%s in (%s)", plural(total, "record"), strings.Join(parts, ", "))
}

// runAgain returns the weir run command that publishes the rest of the
// input c cut short, and submits the job again: with -nats (and its auth
// flags: hint) or -data as o has them, -from-line, and the inputs not
// published.
func runAgain(o runOptions, hint string, c *inputCut) string {
	var b strings.Builder
	b.WriteString("weir run" + hint)
	if o.data != "" {
		b.WriteString(" -data " + shellQuote(o.data))
	}
	if o.cancel {
		b.WriteString(" -cancel")
	}
	if o.allowSystem {
		b.WriteString(" -allow-system-subjects")
	}
	if o.time {
		b.WriteString(" -time")
	}
	b.WriteString(" -from-line " + strconv.Itoa(c.next) + " " + shellQuote(o.spec))
	for _, in := range c.inputs() {
		b.WriteString(" -input " + shellQuote(in))
	}
	return b.String()
}

// runResume says how to publish the rest of the -input that c cut short,
// for inputCut.resume. A job that runs on (with -nats, without -cancel;
// submitted: the cut came after the submit) is given it with weir input;
// else weir run submits the job again (runAgain): its streams keep what
// was published, which it reads from the start along with the rest. The
// embedded default's temporary directory keeps nothing.
func runResume(spec *jobspec.Spec, o runOptions, embedded, submitted bool, c *inputCut) string {
	switch {
	case embedded && o.data == "":
		return "; nothing is kept: the embedded NATS's streams go with this run's temporary directory (-data DIR keeps them)"
	case submitted && !embedded && !o.cancel:
		t := ""
		if o.time {
			t = " -time"
		}
		return fmt.Sprintf("; job %s runs on: publish the rest with: weir input%s%s -from-line %d %s %s",
			spec.Name, o.nats.hint(), t, c.next, shellQuote(o.spec), quoteAll(c.inputs()))
	}
	return "; publish the rest with: " + runAgain(o, o.nats.hint(), c)
}
