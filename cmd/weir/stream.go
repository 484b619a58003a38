package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/worker"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/subject"
)

func init() {
	register(command{Name: "stream", Summary: "list, show, create, change or remove the JetStream streams jobs read and write (size, limits, duplicate window)", Run: runStream})
}

const streamUsage = `ls|info|add|edit|rm [flags] [STREAM]

  weir stream ls                  every stream: messages, size, first and last
                                  sequence, duplicate window, limits
  weir stream info STREAM         one stream's subjects, state and limits
  weir stream add STREAM -subjects S[,S...] [-replicas N] [-storage file|memory]
                   [-dupe-window D] [-max-age D] [-max-bytes SIZE]
                   [-max-msgs N] [-max-msgs-per-subject N]
                                  create a stream as weir run -create-streams
                                  does (atomic and batched publish allowed, a
                                  duplicate window of what an exactly-once
                                  sink with the default checkpoints needs,
                                  2m10s; no limits; without -replicas, as
                                  many replicas as the coordinator keeps its
                                  job records with, at most the cluster's
                                  servers, 1 without one), e.g. to
                                  pre-load a backfill (weir input JOB.yaml
                                  FILE publishes to it); refused for weir's
                                  and NATS's own names and subjects (as a job
                                  spec is), and for subjects another stream
                                  stores, naming it
  weir stream edit STREAM [-dupe-window D] [-max-age D] [-max-bytes SIZE]
                   [-max-msgs N] [-max-msgs-per-subject N] [-force]
                                  change a stream's limits (0 or -1: none;
                                  -dupe-window: how long it remembers
                                  message ids, which an exactly-once sink's
                                  recovery needs, and weir job submit checks);
                                  refused, where a job that has not ended
                                  writes it, for a duplicate window shorter
                                  than its exactly-once sink needs, and for
                                  limits that would drop its committed
                                  output (discard old) (-force: all the same)
  weir stream rm STREAM... [-force]
                                  delete streams and every message in them, for
                                  good; refused, before any goes, while a job
                                  that has not ended reads or writes one (stop
                                  or cancel it first), or when no coordinator
                                  answers to tell (-force: all the same);
                                  weir's own streams (KV_weir_*, OBJ_weir_*:
                                  job records, modules, checkpoints; ls lists
                                  them apart) never

A stream weir run creates keeps everything (no limits): its disk use grows
with its input and output; give it -max-age or -max-bytes here. weir's
messages that name a stream to change say which of these to run. Without
it, the nats CLI does the same (nats stream info / edit).`

// streamFlags are weir stream edit's (and add's): each set one changes
// the stream.
type streamFlags struct {
	dupeWindow, maxAge  time.Duration
	maxBytes            sizeFlag
	maxMsgs, maxPerSubj int64
	set                 map[string]bool
}

// runStream is weir stream.
func runStream(ctx context.Context, std Stdio, args []string) error {
	fs := newFlags(std, "stream", streamUsage)
	var nf natsFlags
	nf.register(fs, defaultNATS, "NATS server URL")
	var sf streamFlags
	fs.DurationVar(&sf.dupeWindow, "dupe-window", 0, "edit: how long the stream remembers message ids")
	fs.DurationVar(&sf.maxAge, "max-age", 0, "edit: drop messages older than this (0: keep them)")
	fs.Var(&sf.maxBytes, "max-bytes", "edit: drop the oldest messages past this size (e.g. 10GiB; 0: no limit)")
	fs.Int64Var(&sf.maxMsgs, "max-msgs", 0, "edit: drop the oldest messages past this many (0 or -1: no limit)")
	fs.Int64Var(&sf.maxPerSubj, "max-msgs-per-subject", 0, "edit: keep at most this many messages per subject (0 or -1: no limit)")
	subjects := fs.String("subjects", "", "add: the subjects the stream stores, comma-separated (wildcards * and > allowed)")
	replicas := fs.Int("replicas", 1, "add: servers of a cluster that keep the stream, 1-5; not given: as many as the coordinator keeps its job records with (weir up -replicas), at most the cluster's servers")
	storage := fs.String("storage", "file", "add: where the servers keep its messages: file or memory")
	force := fs.Bool("force", false, "rm: remove the stream even while a job that has not ended reads or writes it; edit: change it even where a running job's sink needs what the change takes away")
	pos, err := positional(fs, args, func(a []string) error { return parseFlags(fs, a) })
	if err != nil {
		return err
	}
	sf.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { sf.set[f.Name] = true })
	subs := []string{"ls", "info", "add", "edit", "rm"}
	switch {
	case len(pos) == 0:
		fs.Usage()
		return usagef("stream: missing subcommand (ls, info, add, edit or rm)")
	case !slices.Contains(subs, pos[0]):
		return usagef("stream: unknown subcommand %q (%sls, info, add, edit or rm)", pos[0], didYouMean(pos[0], subs))
	case pos[0] == "ls" && len(pos) != 1, pos[0] == "rm" && len(pos) < 2, pos[0] != "ls" && pos[0] != "rm" && len(pos) != 2:
		return usagef("stream %s: want %s", pos[0], map[string]string{"ls": "no argument", "info": "STREAM", "add": "STREAM and -subjects", "edit": "STREAM and the limits to change", "rm": "one STREAM or more"}[pos[0]])
	case pos[0] != "rm" && pos[0] != "edit" && *force:
		return usagef("stream %s: -force is a flag of stream rm and stream edit", pos[0])
	case pos[0] != "add" && (sf.set["subjects"] || sf.set["replicas"] || sf.set["storage"]):
		return usagef("stream %s: -subjects, -replicas and -storage are flags of stream add (a stream's subjects, replicas and storage: the nats CLI's stream edit)", pos[0])
	case pos[0] == "add" && strings.Trim(*subjects, ", ") == "":
		return usagef("stream add %s: give -subjects, the subjects it stores (e.g. -subjects 'orders.>,refunds.*')", pos[1])
	case pos[0] == "add" && (*replicas < 1 || *replicas > 5):
		return usagef("stream add %s: -replicas %d: 1 to 5, and above 1 only on a NATS cluster", pos[1], *replicas)
	case pos[0] == "add" && *storage != "file" && *storage != "memory":
		return usagef("stream add %s: -storage %q: file or memory", pos[1], *storage)
	case pos[0] != "edit" && pos[0] != "add" && len(sf.set) > len(nfSet(sf.set)):
		return usagef("stream %s: -dupe-window, -max-age, -max-bytes, -max-msgs and -max-msgs-per-subject are flags of stream add and stream edit", pos[0])
	case pos[0] == "edit" && len(sf.set) == len(nfSet(sf.set)):
		return usagef("stream edit: give the limits to change (-dupe-window, -max-age, -max-bytes, -max-msgs, -max-msgs-per-subject)")
	}
	nc, err := connectNATS(&nf, "weir stream", std.Err)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("stream: jetstream: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch pos[0] {
	case "ls":
		var infos, own []*jetstream.StreamInfo
		if err := natsconn.ThroughElection(ctx, nc, natsconn.ElectionTry, func(ctx context.Context) error {
			infos, own = nil, nil
			lister := js.ListStreams(ctx)
			for in := range lister.Info() {
				if _, ok := weirOwn(in.Config); ok {
					own = append(own, in)
					continue
				}
				infos = append(infos, in)
			}
			return lister.Err()
		}); err != nil {
			return fmt.Errorf("stream ls: %w", err)
		}
		printStreams(std.Out, infos)
		if len(own) > 0 {
			var said []string
			for _, in := range own {
				what, _ := weirOwn(in.Config)
				said = append(said, fmt.Sprintf("%s (%s)", in.Config.Name, what))
			}
			slices.Sort(said)
			fmt.Fprintf(std.Out, "weir's own: %s\n", strings.Join(said, ", "))
		}
		return nil
	case "info":
		st, err := streamNamed(ctx, js, pos[1])
		if err != nil {
			return err
		}
		printStreamInfo(std.Out, st.CachedInfo())
		return nil
	case "rm":
		return removeStreams(ctx, std, nc, js, pos[1:], *force)
	case "add":
		return addStream(ctx, std, nc, js, pos[1], strings.Split(*subjects, ","), *replicas, *storage, &sf)
	}
	st, err := streamNamed(ctx, js, pos[1])
	if err != nil {
		return err
	}
	cfg := st.CachedInfo().Config
	changes := sf.apply(&cfg)
	if err := sf.windowPastAge(pos[1], cfg); err != nil {
		return err
	}
	if !*force {
		if err := editInUse(ctx, std.Err, nc, st.CachedInfo(), cfg, sf); err != nil {
			return err
		}
	}
	if err := natsconn.ThroughElection(ctx, nc, natsconn.ElectionTry, func(ctx context.Context) error {
		_, err := js.UpdateStream(ctx, cfg) // the same configuration again: no harm
		return err
	}); err != nil {
		return fmt.Errorf("stream edit %s: %w", pos[1], err)
	}
	fmt.Fprintf(std.Out, "stream %s: %s\n", pos[1], strings.Join(changes, ", "))
	return nil
}

// windowPastAge refuses, before the server does, an edit that leaves
// stream's duplicate window cfg.Duplicates longer than its max age,
// saying which flag to give: the server's own refusal ("duplicates window
// can not be larger then max age", err_code 10052) named neither. Both
// ways out are said, as the window may be one an exactly-once sink needs
// (a job refuses a stream whose window is shorter; editInUse, an edit
// that shortens it under a running job): a longer -max-age keeps it.
func (sf *streamFlags) windowPastAge(stream string, cfg jetstream.StreamConfig) error {
	if cfg.MaxAge <= 0 || cfg.Duplicates <= cfg.MaxAge {
		return nil
	}
	window, age := "its duplicate window "+cfg.Duplicates.String(), "its max age "+cfg.MaxAge.String()
	if sf.set["dupe-window"] {
		window = "-dupe-window " + cfg.Duplicates.String()
	}
	if sf.set["max-age"] {
		age = "-max-age " + cfg.MaxAge.String()
	}
	return fmt.Errorf("stream edit %s: %s is longer than %s, which JetStream refuses: give -dupe-window %s (or shorter), or -max-age %s (or longer) to keep the window an exactly-once sink may need; nothing changed",
		stream, window, age, cfg.MaxAge, cfg.Duplicates)
}

// nfSet returns the names in set that are connection flags, not edit's.
func nfSet(set map[string]bool) []string {
	var out []string
	for name := range set {
		switch name {
		case "dupe-window", "max-age", "max-bytes", "max-msgs", "max-msgs-per-subject", "subjects", "replicas", "storage":
		default:
			out = append(out, name)
		}
	}
	return out
}

// addStream is weir stream add: it creates stream name storing subjects
// (empty ones left out) as weir run -create-streams would for a sink of
// a job with the default checkpoints (addToStream, createStream), kept by
// replicas servers (without -replicas, the coordinator's, as weir run
// -nats gives: defaultReplicas) in storage, with the limits of sf. It
// refuses weir's
// and NATS's own stream names and subjects (jobspec.Reserved, as a job
// spec's sources and sinks are), a stream of the name there already,
// subjects that overlap without one covering the other, and a duplicate
// window longer than the max age, each before the server would.
func addStream(ctx context.Context, std Stdio, nc *nats.Conn, js jetstream.JetStream, name string, subjects []string, replicas int, storage string, sf *streamFlags) error {
	if jobspec.WeirOwnStream(name) || jobspec.NATSOwnStream(name) {
		return fmt.Errorf("stream add %s: the name of one of weir's own streams (KV_weir_*, OBJ_weir_*) or the NATS server's ($MQTT_*), which jobs may not read or write; name a stream of your own", name)
	}
	note := ""
	if !sf.set["replicas"] {
		replicas, note = defaultReplicas(coordinatorReplicas(ctx, js), clusterServers(nc))
	}
	window := max(defaultDuplicateWindow, worker.DuplicateWindow(jobspec.Checkpointing{Interval: jobspec.DefaultInterval, Timeout: jobspec.DefaultTimeout}, jobspec.Sink{}))
	var cfgs []jetstream.StreamConfig
	var given []string
	for _, subj := range subjects {
		if subj = strings.TrimSpace(subj); subj == "" {
			continue
		}
		if reserved, why, ok := (jobspec.Reserved{}).Overlaps(subj); ok {
			return fmt.Errorf("stream add %s: subject %q overlaps %s (%s), which jobs may not read or write; choose subjects of your own", name, subj, reserved, why)
		}
		for _, other := range given {
			if subject.Overlap(subj, other) && !subject.Covers(subj, other) && !subject.Covers(other, subj) {
				return fmt.Errorf("stream add %s: subjects %q and %q overlap, which a stream's subjects may not: give one that stores both", name, other, subj)
			}
		}
		given = append(given, subj)
		cfgs = addToStream(cfgs, name, subj, replicas, window, true)
	}
	if len(cfgs) == 0 {
		return usagef("stream add %s: give -subjects, the subjects it stores (e.g. -subjects 'orders.>,refunds.*')", name)
	}
	cfg := cfgs[0]
	if storage == "memory" {
		cfg.Storage = jetstream.MemoryStorage
	}
	sf.apply(&cfg)
	if cfg.MaxAge > 0 && cfg.Duplicates > cfg.MaxAge {
		if sf.set["dupe-window"] {
			return fmt.Errorf("stream add %s: -dupe-window %s is longer than -max-age %s, which JetStream refuses: give -dupe-window %s (or shorter), or -max-age %s (or longer)",
				name, cfg.Duplicates, cfg.MaxAge, cfg.MaxAge, cfg.Duplicates)
		}
		return fmt.Errorf("stream add %s: -max-age %s is shorter than its default duplicate window %s (what an exactly-once sink with the default checkpoints needs), which JetStream refuses: give -max-age %s (or longer), or -dupe-window %s (or shorter) where no exactly-once sink writes it",
			name, cfg.MaxAge, cfg.Duplicates, cfg.Duplicates, cfg.MaxAge)
	}
	if in, err := js.Stream(ctx, name); err == nil {
		return fmt.Errorf("stream add %s: there is a stream %s already (subjects %s): weir stream edit %s changes its limits, weir stream rm %s removes it",
			name, name, strings.Join(in.CachedInfo().Config.Subjects, ", "), name, name)
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("stream add %s: %w", name, err)
	}
	err := createStream(ctx, std, js, cfg,
		func(other string) string {
			return fmt.Sprintf("read or write stream %s (weir stream info %s), or choose subjects no stream stores", other, other)
		},
		"its subjects overlap (%s), which a stream's subjects may not: give one that stores them all")
	if err != nil {
		return err
	}
	fmt.Fprintf(std.Out, "  storage %s, duplicate window %s, limits: %s; atomic and batched publish allowed\n", storage, cfg.Duplicates, limitsAndDiscard(cfg))
	sayReplicas(std, []string{name}, replicas, note, clusterServers(nc))
	return nil
}

// streamNamed returns the stream named name, or an error that says which
// streams there are when there is none of that name.
func streamNamed(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	var st jetstream.Stream
	err := natsconn.ThroughElection(ctx, js.Conn(), natsconn.ElectionTry, func(ctx context.Context) (err error) {
		st, err = js.Stream(ctx, name)
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		var names []string
		lister := js.StreamNames(ctx)
		for n := range lister.Name() {
			names = append(names, n)
		}
		meant := ""
		if c := didYouMean(name, names); c != "" {
			meant = " (" + strings.TrimSuffix(c, " ") + ")"
		}
		return nil, fmt.Errorf("no stream %q%s: weir stream ls lists them", name, meant)
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	return st, nil
}

// apply sets in cfg the limits sf was given and says each change.
func (sf *streamFlags) apply(cfg *jetstream.StreamConfig) []string {
	noLimit := func(n int64) int64 {
		if n <= 0 {
			return -1
		}
		return n
	}
	var changes []string
	say := func(what, from, to string) {
		changes = append(changes, fmt.Sprintf("%s %s → %s", what, from, to))
	}
	if sf.set["dupe-window"] {
		say("duplicate window", cfg.Duplicates.String(), sf.dupeWindow.String())
		cfg.Duplicates = sf.dupeWindow
	}
	if sf.set["max-age"] {
		say("max age", limitAge(cfg.MaxAge), limitAge(sf.maxAge))
		cfg.MaxAge = sf.maxAge
	}
	if sf.set["max-bytes"] {
		n := noLimit(int64(sf.maxBytes))
		say("max bytes", limitSize(cfg.MaxBytes), limitSize(n))
		cfg.MaxBytes = n
	}
	if sf.set["max-msgs"] {
		n := noLimit(sf.maxMsgs)
		say("max messages", limitCount(cfg.MaxMsgs), limitCount(n))
		cfg.MaxMsgs = n
	}
	if sf.set["max-msgs-per-subject"] {
		n := noLimit(sf.maxPerSubj)
		say("max messages per subject", limitCount(cfg.MaxMsgsPerSubject), limitCount(n))
		cfg.MaxMsgsPerSubject = n
	}
	return changes
}

func limitAge(d time.Duration) string {
	if d <= 0 {
		return "none"
	}
	return d.String()
}

func limitSize(n int64) string {
	if n <= 0 {
		return "none"
	}
	return jobspec.FormatSize(n)
}

func limitCount(n int64) string {
	if n <= 0 {
		return "none"
	}
	return strconv.FormatInt(n, 10)
}

// limits says a stream's limits in one cell: "max-age 24h, max-bytes 10GiB",
// or "none".
func limits(c jetstream.StreamConfig) string {
	var l []string
	if c.MaxAge > 0 {
		l = append(l, "max-age "+c.MaxAge.String())
	}
	if c.MaxBytes > 0 {
		l = append(l, "max-bytes "+jobspec.FormatSize(c.MaxBytes))
	}
	if c.MaxMsgs > 0 {
		l = append(l, "max-msgs "+strconv.FormatInt(c.MaxMsgs, 10))
	}
	if c.MaxMsgsPerSubject > 0 {
		l = append(l, "max-msgs-per-subject "+strconv.FormatInt(c.MaxMsgsPerSubject, 10))
	}
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// limitsAndDiscard is limits with, where the stream has any, what it
// does once one is reached: "max-msgs 15000, discard new" (a sink's
// commit fails) or "…, discard old" (the oldest messages, committed
// output too, go without a word).
func limitsAndDiscard(c jetstream.StreamConfig) string {
	l := limits(c)
	if l == "none" {
		return l
	}
	if c.Discard == jetstream.DiscardNew {
		return l + ", discard new"
	}
	return l + ", discard old"
}

// printStreams lists streams, one per line.
func printStreams(w io.Writer, infos []*jetstream.StreamInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tSUBJECTS\tMESSAGES\tSIZE\tSEQUENCES\tDUPE WINDOW\tLIMITS")
	for _, in := range infos {
		s := in.State
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d-%d\t%s\t%s\n", in.Config.Name, strings.Join(in.Config.Subjects, " "), s.Msgs,
			size(int64(s.Bytes)), s.FirstSeq, s.LastSeq, in.Config.Duplicates, limitsAndDiscard(in.Config))
	}
	tw.Flush()
}

// printStreamInfo says one stream's subjects, state and limits.
func printStreamInfo(w io.Writer, in *jetstream.StreamInfo) {
	c, s := in.Config, in.State
	fmt.Fprintf(w, "stream %s: subjects %s; %d messages, %s, sequences %d-%d; created %s\n", c.Name, strings.Join(c.Subjects, " "),
		s.Msgs, size(int64(s.Bytes)), s.FirstSeq, s.LastSeq, in.Created.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "  storage %s, %d replica(s), duplicate window %s, limits: %s\n", c.Storage, max(c.Replicas, 1),
		c.Duplicates, limitsAndDiscard(c))
	fmt.Fprintf(w, "  atomic publish %t, batched publish %t\n", c.AllowAtomicPublish, c.AllowBatchPublish)
}

// weirOwnStreams names what weir keeps in the streams of its own buckets
// on their default names.
var weirOwnStreams = map[string]string{
	"KV_weir_jobs":             "job records",
	"KV_weir_coordinator":      "the coordinator lease",
	"OBJ_weir_modules":         "the module registry",
	"KV_weir_modules_versions": "the module registry's versions",
	"OBJ_weir_state":           "checkpoint state",
	"KV_weir_checkpoints":      "checkpoint metadata",
}

// weirOwn reports whether the stream of cfg is one of weir's own — the
// key-value bucket or object store of its job records, module registry,
// checkpoints or coordinator lease (KV_weir_*, OBJ_weir_*) — and what it
// holds.
func weirOwn(cfg jetstream.StreamConfig) (string, bool) {
	if !jobspec.WeirOwnStream(cfg.Name) {
		return "", false
	}
	if what, ok := weirOwnStreams[cfg.Name]; ok {
		return what, true
	}
	if what, ok := strings.CutPrefix(cfg.Description, "weir "); ok && what != "" {
		return what, true
	}
	return "weir's state", true
}

// removeStreams is weir stream rm: it deletes the streams names, each
// with every message in it. Unless force, it refuses, before any goes,
// while a job that has not ended reads or writes one of them (its
// sources would fail, its exactly-once sinks could not commit), and when
// no coordinator answers within inUseWait to tell; of the jobs that have
// ended, it names those that used one (a restore of them would not find
// it).
func removeStreams(ctx context.Context, std Stdio, nc *nats.Conn, js jetstream.JetStream, names []string, force bool) error {
	infos := make([]*jetstream.StreamInfo, len(names))
	for i, name := range names {
		st, err := streamNamed(ctx, js, name)
		if err != nil {
			return err
		}
		infos[i] = st.CachedInfo()
		if what, ok := weirOwn(infos[i].Config); ok {
			// Not even with -force: the jobs, modules and checkpoints
			// weir keeps there would be gone for every job.
			return fmt.Errorf("stream rm %s: weir's own stream (%s): weir keeps its state there, for every job; nothing removed "+
				"(weir job rm, weir module rm and weir checkpoint rm remove what is in it; the nats CLI's stream rm removes the stream)", name, what)
		}
	}
	var ended map[string][]string
	if !force {
		actx, cancel := context.WithTimeout(ctx, inUseWait)
		jobs, err := control.NewAPIClient(nc, "").Jobs(actx)
		cancel()
		if err != nil {
			return fmt.Errorf("stream rm %s: no coordinator answered within %s to tell whether a job reads or writes it: nothing removed; -force removes it all the same",
				strings.Join(names, " "), inUseWait)
		}
		if users := streamUsers(jobs, names, false); len(users) > 0 {
			var said []string
			for _, name := range names {
				if len(users[name]) > 0 {
					said = append(said, name+": "+strings.Join(users[name], ", "))
				}
			}
			return fmt.Errorf("stream rm: %s: stop or cancel the job first (nothing removed), or give -force", strings.Join(said, "; "))
		}
		ended = streamUsers(jobs, names, true)
	}
	for i, name := range names {
		failed := false // a try failed: it may have removed the stream all the same
		err := natsconn.ThroughElection(ctx, nc, natsconn.ElectionTry, func(ctx context.Context) error {
			err := js.DeleteStream(ctx, name)
			failed = failed || err != nil && natsconn.Leaderless(err)
			return err
		})
		if err != nil && !(failed && errors.Is(err, jetstream.ErrStreamNotFound)) {
			return fmt.Errorf("stream rm %s: %w", name, err)
		}
		fmt.Fprintf(std.Out, "removed stream %s (%d messages, %s)\n", name, infos[i].State.Msgs, size(int64(infos[i].State.Bytes)))
		if len(ended[name]) > 0 {
			fmt.Fprintf(std.Out, "  %s: a restore of it would not find the stream\n", strings.Join(ended[name], ", "))
		}
	}
	return nil
}

// editInUse refuses the edit of stream in into after, sf's limits set,
// where a job that has not ended writes the stream: a duplicate window
// shorter than one of its exactly-once sinks needs (control.JobStatus.
// SinkDuplicateWindows, as submit checks it) would let a recovery store
// output twice; new limits on a stream that discards old messages would
// delete committed output, now and as the job writes more. One line,
// naming the job, the sink and what the change would do. Where no
// coordinator answers within inUseWait, it says on w that it could not
// tell, and lets the edit go: weir's advice for a stream that grows
// without bound is this command, with or without a coordinator.
func editInUse(ctx context.Context, w io.Writer, nc *nats.Conn, in *jetstream.StreamInfo, after jetstream.StreamConfig, sf streamFlags) error {
	before, name := in.Config, in.Config.Name
	shorter := sf.set["dupe-window"] && after.Duplicates < before.Duplicates
	var limited []string // the limits set that drop output: "max-msgs 100"
	if after.Discard == jetstream.DiscardOld {
		if sf.set["max-msgs"] && after.MaxMsgs > 0 && (before.MaxMsgs <= 0 || after.MaxMsgs < before.MaxMsgs) {
			limited = append(limited, "max-msgs "+strconv.FormatInt(after.MaxMsgs, 10))
		}
		if sf.set["max-bytes"] && after.MaxBytes > 0 && (before.MaxBytes <= 0 || after.MaxBytes < before.MaxBytes) {
			limited = append(limited, "max-bytes "+jobspec.FormatSize(after.MaxBytes))
		}
		if sf.set["max-age"] && after.MaxAge > 0 && (before.MaxAge <= 0 || after.MaxAge < before.MaxAge) {
			limited = append(limited, "max-age "+after.MaxAge.String())
		}
	}
	if !shorter && len(limited) == 0 {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, inUseWait)
	jobs, err := control.NewAPIClient(nc, "").Jobs(actx)
	cancel()
	if err != nil {
		fmt.Fprintf(w, "weir: no coordinator answered within %s to tell whether a running job writes stream %s, which the change may harm; changing it all the same\n", inUseWait, name)
		return nil
	}
	for _, j := range jobs {
		if j.State.Terminal() {
			continue
		}
		for _, sk := range j.Sinks {
			if sk.Kind != jobspec.KindJetStream || sk.Stream != name {
				continue
			}
			if need := j.SinkDuplicateWindows[sk.Name]; shorter && after.Duplicates < need {
				return fmt.Errorf("stream edit %s: job %s (%s) writes it exactly-once (sink %s), whose recovery needs a duplicate window of %s: with %s it could store output twice; nothing changed (stop or cancel the job first, or give -force)",
					name, j.Name, j.State, sk.Name, need, after.Duplicates)
			}
			if len(limited) > 0 {
				return fmt.Errorf("stream edit %s: job %s (%s) writes it (sink %s), and the stream discards old messages: %s would delete %s, committed output, and the oldest again as the job writes more; nothing changed (give -force to all the same)",
					name, j.Name, j.State, sk.Name, strings.Join(limited, ", "), dropped(in, after))
			}
		}
	}
	return nil
}

// dropped says what of stream in the limits of after delete at once:
// "19900 of its 20000 messages", or "the messages older than 1h" (by
// age, which the stream's state does not count), or "none of its 100
// messages yet".
func dropped(in *jetstream.StreamInfo, after jetstream.StreamConfig) string {
	held := int64(in.State.Msgs)
	n := int64(0)
	if after.MaxMsgs > 0 && held > after.MaxMsgs {
		n = held - after.MaxMsgs
	}
	if after.MaxBytes > 0 && int64(in.State.Bytes) > after.MaxBytes && held > 0 {
		// At least the share of the messages the bytes over the limit take.
		over := (int64(in.State.Bytes) - after.MaxBytes) * held / int64(in.State.Bytes)
		n = max(n, over)
	}
	switch {
	case n > 0:
		return fmt.Sprintf("%d of its %d messages", n, held)
	case after.MaxAge > 0 && held > 0:
		return fmt.Sprintf("those of its %d messages older than %s", held, after.MaxAge)
	}
	return fmt.Sprintf("none of its %d messages yet", held)
}
