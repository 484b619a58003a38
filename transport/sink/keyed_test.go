package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// subjectsOf reads every message of stream in order as "subject=value".
func subjectsOf(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) []string {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	must(t, err)
	info, err := st.Info(ctx)
	must(t, err)
	n := int(info.State.Msgs)
	if n == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	must(t, err)
	var out []string
	for len(out) < n {
		if ctx.Err() != nil {
			t.Fatalf("read %d of the %d messages stream %s held: %v", len(out), n, stream, ctx.Err())
		}
		batch, err := cons.Fetch(n-len(out), jetstream.FetchMaxWait(5*time.Second))
		must(t, err)
		for m := range batch.Messages() {
			if k := m.Headers().Get(KeyHeader); "out."+k != m.Subject() {
				t.Fatalf("message %q on %s with key %q", m.Data(), m.Subject(), k)
			}
			out = append(out, m.Subject()+"="+string(m.Data()))
		}
		must(t, batch.Error())
	}
	return out
}

// wantKeyed is what batchOf(from, to) becomes on "out.{key}".
func wantKeyed(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("out.k%d=v%d", i%3, i))
	}
	return out
}

func keyedBatch(keys ...string) []byte {
	var b abi.Builder
	for i, k := range keys {
		b.Add([]byte(k), []byte(fmt.Sprint("v", i)), 0)
	}
	return append([]byte(nil), b.Bytes()...)
}

// A core sink on "out.{key}" publishes each record on out.<key>, a key
// with dots on several tokens; a batch with a key that cannot be a subject
// fails whole, naming the record, before anything of it is published.
func TestKeyedCoreSink(t *testing.T) {
	nc, _ := connect(t, startServer(t))
	sub, err := nc.SubscribeSync("out.>")
	must(t, err)
	s, err := NewCore(nc, "out.{key}")
	must(t, err)
	ctx := context.Background()
	err = s.Write(ctx, keyedBatch("a", "b c"))
	if !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), `record 2 of the batch`) || !strings.Contains(err.Error(), `key "b c"`) {
		t.Fatalf("bad key: %v", err)
	}
	must(t, s.Write(ctx, keyedBatch("a", "eu.fr")))
	_, err = s.PreCommit(ctx, 1)
	must(t, err)
	for _, want := range []string{"out.a=v0", "out.eu.fr=v1"} {
		m, err := sub.NextMsg(30 * time.Second)
		must(t, err)
		if got := m.Subject + "=" + string(m.Data); got != want || m.Header.Get(KeyHeader) == "" {
			t.Fatalf("got %s (key %q), want %s", got, m.Header.Get(KeyHeader), want)
		}
	}
	if _, err := NewCore(nc, "{key}"); err == nil {
		t.Error("a template without a prefix was taken")
	}
}

func TestKeyedAtLeastOnceSink(t *testing.T) {
	for _, mode := range []PublishMode{PublishFast, PublishAtomic, PublishAsync} {
		t.Run(string(mode), func(t *testing.T) {
			scfg := outStream(mode)
			scfg.Subjects = []string{"out.>"}
			nc, js, ctx := outSetup(t, scfg)
			s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out.{key}", Publish: mode})
			must(t, err)
			defer s.Close()
			must(t, s.Write(ctx, batchOf(0, 100)))
			if err := s.Write(ctx, keyedBatch("k0", "")); !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), "no key") {
				t.Fatalf("a record without a key: %v", err)
			}
			must(t, s.Write(ctx, batchOf(100, 150)))
			_, err = s.PreCommit(ctx, 1)
			must(t, err)
			if got := subjectsOf(t, ctx, js, "OUT"); fmt.Sprint(got) != fmt.Sprint(wantKeyed(0, 150)) {
				t.Fatalf("stream holds %v", got)
			}
		})
	}
}

// The exactly-once sink on "out.{key}" across a crash in the middle of a
// commit, in every publish mode: each record lands once, in order, on its
// own subject (an atomic batch spans several subjects).
func TestKeyedExactlyOnceCrashMidCommit(t *testing.T) {
	for _, mode := range publishModes {
		t.Run("publish="+string(mode), func(t *testing.T) {
			scfg := outStream(mode)
			scfg.Subjects = []string{"out.>"}
			nc, js, ctx := outSetup(t, scfg)
			cfg := ExactlyOnceConfig{Stream: "OUT", Subject: "out.{key}", Job: "job1", Task: "sink[0]", BatchSize: 100}
			s, err := NewExactlyOnce(ctx, nc, cfg)
			must(t, err)
			must(t, s.Write(ctx, batchOf(0, 150)))
			_, err = s.PreCommit(ctx, 1)
			must(t, err)
			must(t, s.Commit(ctx, 1))
			must(t, s.Wait(ctx))
			must(t, s.Write(ctx, batchOf(150, 400)))
			state, err := s.PreCommit(ctx, 2)
			must(t, err)
			cutCommit(t, ctx, s, mode, 2, 130)
			s.Close()

			s, err = NewExactlyOnce(ctx, nc, cfg)
			must(t, err)
			defer s.Close()
			must(t, s.Recover(ctx, 2, state))
			must(t, s.Write(ctx, batchOf(400, 420)))
			must(t, s.EndOfInput(ctx))
			if got := subjectsOf(t, ctx, js, "OUT"); fmt.Sprint(got) != fmt.Sprint(wantKeyed(0, 420)) {
				t.Fatalf("stream holds %d messages, want %d once each in order:\n%v", len(got), 420, got)
			}
		})
	}
}

// A key that cannot form a subject, or forms one the stream does not
// store, fails the write before anything of its batch is staged: staged,
// it would fail every commit of its checkpoint.
func TestKeyedExactlyOnceRefusesBadKeys(t *testing.T) {
	scfg := outStream(PublishFast)
	scfg.Subjects = []string{"out.a.*", "out.b"}
	nc, js, ctx := outSetup(t, scfg)
	s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out.{key}", Job: "j", Task: "sink0"})
	must(t, err)
	defer s.Close()
	for _, c := range []struct{ key, want string }{
		{"c", "makes subject out.c, which stream OUT does not store (its subjects: out.a.*, out.b)"},
		{"a.x.y", "makes subject out.a.x.y, which stream OUT does not store"},
		{"a.>", "wildcard token"},
		{"", "no key"},
	} {
		err := s.Write(ctx, keyedBatch("b", c.key))
		if !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "record 2 of the batch") {
			t.Errorf("key %q: %v, want ErrBadKey with %q", c.key, err, c.want)
		}
	}
	must(t, s.Write(ctx, keyedBatch("b", "a.x")))
	_, err = s.PreCommit(ctx, 1)
	must(t, err)
	must(t, s.Commit(ctx, 1))
	must(t, s.Wait(ctx))
	var got []string
	for _, m := range readStream(t, ctx, js, "OUT") {
		got = append(got, m.key+"="+m.value)
	}
	if fmt.Sprint(got) != "[b=v0 a.x=v1]" {
		t.Fatalf("stream holds %v, want only the good batch", got)
	}
}

// A keyed sink reaches the stream it names even when its filter overlaps
// another stream's subjects.
func TestKeyedAtLeastOnceNamedStream(t *testing.T) {
	scfg := outStream(PublishFast)
	scfg.Subjects = []string{"out.b"}
	nc, js, ctx := outSetup(t, scfg)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"out.a"}})
	must(t, err)
	s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out.{key}"})
	must(t, err)
	defer s.Close()
	if err := s.Write(ctx, keyedBatch("a")); !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), "stream OUT does not store") {
		t.Fatalf("key a: %v", err)
	}
	must(t, s.Write(ctx, keyedBatch("b")))
	_, err = s.PreCommit(ctx, 1)
	must(t, err)
	if got := readStream(t, ctx, js, "OUT"); len(got) != 1 {
		t.Fatalf("OUT holds %v", got)
	}
}

// On a stream that keeps one message per subject, a keyed exactly-once
// sink leaves the latest record of every key, in every publish mode
// (an atomic batch holds several records of a key).
func TestKeyedExactlyOnceLatestPerKey(t *testing.T) {
	for _, mode := range publishModes {
		t.Run("publish="+string(mode), func(t *testing.T) {
			scfg := outStream(mode)
			scfg.Subjects, scfg.MaxMsgsPerSubject = []string{"out.>"}, 1
			nc, js, ctx := outSetup(t, scfg)
			s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out.{key}", Job: "j", Task: "sink0", BatchSize: 100})
			must(t, err)
			defer s.Close()
			must(t, s.Write(ctx, batchOf(0, 250)))
			_, err = s.PreCommit(ctx, 1)
			must(t, err)
			must(t, s.Commit(ctx, 1))
			must(t, s.Write(ctx, batchOf(250, 301)))
			must(t, s.EndOfInput(ctx))
			st, err := js.Stream(ctx, "OUT")
			must(t, err)
			for k, want := range map[string]string{"k0": "v300", "k1": "v298", "k2": "v299"} {
				m, err := st.GetLastMsgForSubject(ctx, "out."+k)
				must(t, err)
				if string(m.Data) != want {
					t.Errorf("latest on out.%s: %s, want %s", k, m.Data, want)
				}
			}
			info, err := st.Info(ctx)
			must(t, err)
			if info.State.Msgs != 3 {
				t.Errorf("stream holds %d messages, want 3", info.State.Msgs)
			}
		})
	}
}

// serverLog keeps the warnings and errors of an embedded server.
type serverLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *serverLog) add(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}
func (l *serverLog) Noticef(string, ...any)         {}
func (l *serverLog) Debugf(string, ...any)          {}
func (l *serverLog) Tracef(string, ...any)          {}
func (l *serverLog) Warnf(format string, v ...any)  { l.add(format, v...) }
func (l *serverLog) Errorf(format string, v ...any) { l.add(format, v...) }
func (l *serverLog) Fatalf(format string, v ...any) { l.add(format, v...) }

// Every key a keyed sink takes makes a subject the server keeps: after a
// restart it reads the stream back without finding a subject it calls
// corrupt. nats-server takes a subject with the replacement character
// U+FFFD (valid UTF-8) for the mark of a corrupt one, drops the stream's
// state file and rebuilds it from the messages, at every restart.
func TestKeyedSubjectsSurviveARestart(t *testing.T) {
	log := &serverLog{}
	srv := embeddedtest.Server(t, embedded.Config{Logger: log})
	nc, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	scfg := outStream(PublishFast)
	scfg.Subjects = []string{"out.>"}
	_, err := js.CreateStream(ctx, scfg)
	must(t, err)
	s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out.{key}"})
	must(t, err)
	defer s.Close()
	took := 0
	for _, key := range []string{"fox", "größe", "a\u00a0b", "a\u2028b", "\u0085", "a\uFFFDb", "\uFFFD", "a*b", "$x", "a>b",
		strings.Repeat("x", 2000), strings.Repeat("y.", 900) + "z"} {
		if err := s.Write(ctx, keyedBatch(key)); err != nil {
			if !errors.Is(err, ErrBadKey) {
				t.Fatalf("key %q: %v", key, err)
			}
			continue
		}
		took++
	}
	_, err = s.PreCommit(ctx, 1)
	must(t, err)
	embeddedtest.Restart(t, srv, nc)
	st, err := js.Stream(ctx, "OUT")
	must(t, err)
	if n := st.CachedInfo().State.Msgs; n != uint64(took) {
		t.Errorf("OUT holds %d messages after the restart, the sink took %d", n, took)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, l := range log.lines {
		if strings.Contains(l, "corrupt") {
			t.Errorf("server: %s", l)
		}
	}
}

// A checkpoint staged before the state recorded its subject (version 3)
// is re-committed on the sink's subject: staged under one subject and
// recovered under a keyed one whose stream does not store a record's
// subject (a restore with a changed spec), it fails the recovery with
// ErrBadKey, publishing nothing, instead of failing every commit. (State
// that records its subject is re-committed there:
// TestRecoverOnTheSubjectTheCheckpointWasStagedWith.)
func TestKeyedRecoverRefusesStagedRecordsWithoutASubject(t *testing.T) {
	scfg := outStream(PublishFast)
	scfg.Subjects = []string{"out", "out.k0", "out.k1"}
	nc, js, ctx := outSetup(t, scfg)
	a, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0"})
	must(t, err)
	must(t, a.Write(ctx, batchOf(0, 6))) // keys k0, k1, k2
	state, err := a.PreCommit(ctx, 1)
	must(t, err)
	a.Close()
	st, err := decodeState(state)
	must(t, err)
	state = stateV3(st)
	b, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out.{key}", Job: "j", Task: "sink0"})
	must(t, err)
	defer b.Close()
	err = b.Recover(ctx, 1, state)
	if !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), `key "k2" makes subject out.k2, which stream OUT does not store`) {
		t.Fatalf("recover: %v", err)
	}
	if got := readStream(t, ctx, js, "OUT"); len(got) != 0 {
		t.Fatalf("stream holds %v", got)
	}
}

// A key may stand in the middle of a subject ("out.{key}.v1"), as one
// token: every publish mode puts each record on its key's subject, and a
// key with a dot fails the write before anything of its batch is staged.
func TestKeyedSubjectInTheMiddle(t *testing.T) {
	for _, mode := range publishModes {
		t.Run("publish="+string(mode), func(t *testing.T) {
			scfg := outStream(mode)
			scfg.Subjects = []string{"out.*.v1"}
			nc, js, ctx := outSetup(t, scfg)
			s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out.{key}.v1", Job: "j", Task: "sink0", Publish: mode})
			must(t, err)
			defer s.Close()
			err = s.Write(ctx, keyedBatch("fox", "eu.fr"))
			if !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), "record 2 of the batch") || !strings.Contains(err.Error(), "the key is one token") {
				t.Fatalf("a key with a dot: %v", err)
			}
			must(t, s.Write(ctx, keyedBatch("fox", "owl", "fox")))
			_, err = s.PreCommit(ctx, 1)
			must(t, err)
			must(t, s.Commit(ctx, 1))
			must(t, s.Wait(ctx))
			st, err := js.Stream(ctx, "OUT")
			must(t, err)
			var got []string
			for seq := uint64(1); seq <= 3; seq++ {
				m, err := st.GetMsg(ctx, seq)
				must(t, err)
				got = append(got, m.Subject+"="+string(m.Data))
			}
			if fmt.Sprint(got) != "[out.fox.v1=v0 out.owl.v1=v1 out.fox.v1=v2]" {
				t.Fatalf("stream holds %v", got)
			}
		})
	}
}
