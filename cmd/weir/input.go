package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/ingest"
	"github.com/weirhq/weir/transport/natsconn"
)

func init() {
	register(command{Name: "input", Summary: "publish the lines of files to a running job's sources, as weir run -input does", Run: runInput})
}

const inputUsage = `[-nats URL] [auth flags] [-from-line N] JOB.yaml [SOURCE=]FILE...

Publishes the lines ('key<TAB>value' or 'value') of each FILE to the job's
first source, or of SOURCE=FILE to that source, as weir run -input does: a
keyed line goes on its key's subject where the source's subjects end in a
wildcard (lines.> → lines.<key>), to its key's partition for a partitioned
source; a JetStream stream stores each line once (after a lost connection
weir input publishes again what the stream did not acknowledge, with message
ids of this invocation, within the stream's duplicate window). It gives a job
that runs — under weir up, or one weir run left running with -nats — more
input without another tool. A source that stops at the end (stop: end) is
refused: its job reads its stream only up to where the stream ended when the
job started (give such a source its input with weir run -input, before the
submit); one that stops at a sequence or a time reads what comes before it.
A core NATS source of a job that is not running is refused too: a core
subject keeps nothing for a job that does not read it. A stream keeps what
it is given for a job not submitted yet, or ended: weir input says so. JOB.yaml is the job's spec; its modules are
not built or read. A NATS server that cannot be reached (weir up
restarting) is tried again, said once, until -wait has passed. An
interrupt (Ctrl-C) says how many of a file's records the stream
acknowledged, and the command that publishes the rest (-from-line): the
same command again would publish the part the stream holds once more.`

func runInput(ctx context.Context, std Stdio, args []string) error {
	fs := newFlags(std, "input", inputUsage)
	var nf natsFlags
	nf.register(fs, defaultNATS, "NATS server URL")
	nf.registerWait(fs)
	var timed bool
	fs.BoolVar(&timed, "time", false, timeFlagUsage)
	var from int
	fs.IntVar(&from, "from-line", 0, fromLineUsage)
	pos, err := positional(fs, args, func(a []string) error { return parseFlags(fs, a) })
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		fs.Usage()
		return usagef("input: want JOB.yaml and at least one [SOURCE=]FILE")
	}
	if from < 0 {
		return usagef("input: -from-line %d: give a line number, 1 or more", from)
	}
	spec, err := jobspec.ParseFile(pos[0], jobspec.Options{})
	if err != nil {
		return err
	}
	inputs := inputFlags(pos[1:])
	if err := checkInputs("input", spec, inputs); err != nil {
		return err
	}
	core := false
	for _, in := range inputs {
		src, _ := inputSource(spec, in)
		if src.Stop == jobspec.StopEnd {
			return fmt.Errorf("input %s: source %s stops at the end (stop: end): job %s reads its stream only up to where it ended when the job started; "+
				"give such a source its input with weir run -input, which publishes it before the submit", in, src.Name, spec.Name)
		}
		core = core || src.Kind != jobspec.KindJetStream
	}
	nc, api, err := connectWaiting(ctx, &nf, std.Err)
	if err != nil {
		return err
	}
	defer nc.Close()
	if core {
		// A core subject delivers to whoever listens now: to a job that
		// is not running, the input would be gone.
		st, err := api.Job(ctx, spec.Name)
		switch {
		case errors.Is(err, control.ErrNotFound):
			return fmt.Errorf("input: no job %s on this NATS: a core NATS source keeps nothing for a job that does not read it (weir run%s %s -input … submits it with its input)",
				spec.Name, nf.hint(), shellQuote(pos[0]))
		case err != nil:
			return apiErr("input: job status", err)
		case st.State != control.JobRunning:
			return fmt.Errorf("input: job %s is %s, not running: a core NATS source keeps nothing for a job that does not read it", spec.Name, st.State)
		}
	}
	dial := func(extra ...nats.Option) (*nats.Conn, error) {
		return natsconn.Connect(*nf.options("weir input"), extra...)
	}
	_, err = publishInputs(ctx, std, "input", timed, nc, dial, spec, inputs, nil, ingest.Nonce(), from, nil)
	if cut := (*inputCut)(nil); errors.As(err, &cut) {
		t := ""
		if timed {
			t = " -time"
		}
		cut.resume = fmt.Sprintf("; publish the rest with: weir input%s%s -from-line %d %s %s", nf.hint(), t, cut.next, shellQuote(pos[0]), quoteAll(cut.inputs()))
	}
	if err != nil || core {
		return err
	}
	// A stream keeps the input for a job that is not running: say so,
	// rather than let it read as fed to one.
	sctx, cancel := context.WithTimeout(ctx, inputStatusWait)
	defer cancel()
	st, err := api.Job(sctx, spec.Name)
	switch {
	case errors.Is(err, control.ErrNotFound):
		fmt.Fprintf(std.Err, "no job %s on this NATS yet: its source's stream keeps the input for it (weir run%s %s submits it)\n",
			spec.Name, nf.hint(), shellQuote(pos[0]))
	case err == nil && st.State.Terminal():
		fmt.Fprintf(std.Err, "job %s is %s: its source's stream keeps the input for a restore of it (weir job restore)\n", spec.Name, shownState(st))
	}
	return nil
}

// inputStatusWait bounds how long weir input asks whether the job it fed
// a stream runs, once the input is published.
const inputStatusWait = 3 * time.Second

// connectWaiting is connectAPI for weir input, which a feeding script runs
// again and again: a NATS server that cannot be reached is tried again,
// saying so once, until -wait has passed (weir up restarting: seconds). A
// trial's feeder lost two files to a weir up restart, each refused at once.
// A refusal (authentication, TLS, not NATS) is not tried again.
func connectWaiting(ctx context.Context, nf *natsFlags, w io.Writer) (*nats.Conn, *control.APIClient, error) {
	deadline := time.Now().Add(nf.waitTimeout())
	said := false
	for {
		nc, api, err := connectAPI(nf, w)
		if err == nil || !natsconn.Unreachable(err) || time.Now().After(deadline) {
			return nc, api, err
		}
		if _, greeting := errors.AsType[*natsconn.GreetingError](err); greeting {
			return nc, api, err
		}
		if !said {
			said = true
			fmt.Fprintf(w, "weir: %v; trying again for up to %s (-wait)\n", err, time.Until(deadline).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-time.After(inputRetry):
		}
	}
}

// inputRetry paces connectWaiting's tries.
const inputRetry = 500 * time.Millisecond
