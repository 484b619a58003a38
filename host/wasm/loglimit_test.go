package wasm

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The limiter lets a burst of ten seconds' lines through, then the rate;
// the lines over it are counted in a warning before the next line it
// lets through, and at the end.
func TestLogLimiter(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	l := newLogLimiter(testLogger(&buf), "op", 2)
	l.now = func() time.Time { return now }
	l.after = func(time.Duration, func()) func() bool { return func() bool { return true } } // TestLogLimiterTimer's
	l.last = now
	for i := range 25 {
		l.log(slog.LevelInfo, "line", "n", i)
	}
	if got := strings.Count(buf.String(), "msg=line"); got != 20 {
		t.Fatalf("%d lines of a burst of 25 logged; want 20 (10s at 2/s)\n%s", got, buf.String())
	}
	buf.Reset()
	now = now.Add(time.Second) // two more
	for i := range 3 {
		l.log(slog.LevelInfo, "line", "n", i)
	}
	want := `level=WARN msg="operator op logged more than 2 lines a second: 5 of its lines dropped" operator=op dropped=5`
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], want) || !strings.Contains(lines[1], "msg=line") || !strings.Contains(lines[2], "msg=line") {
		t.Fatalf("after a second:\n%s\nwant the warning (%s), then 2 lines", buf.String(), want)
	}
	// More dropped within ten seconds of that warning: counted, not told
	// before each line let through.
	buf.Reset()
	for range 5 {
		now = now.Add(time.Second)
		for range 3 {
			l.log(slog.LevelInfo, "line")
		}
	}
	if got, lines := strings.Count(buf.String(), "dropped"), strings.Count(buf.String(), "msg=line"); got != 0 || lines != 10 {
		t.Fatalf("5 seconds later, %d warnings and %d lines; want 0 and 10:\n%s", got, lines, buf.String())
	}
	buf.Reset()
	now = now.Add(5 * time.Second)
	l.log(slog.LevelInfo, "line")
	if !strings.Contains(buf.String(), "6 of its lines dropped") {
		t.Fatalf("ten seconds after the warning: %q; want the 6 dropped since told", buf.String())
	}
	// The 9 lines left of the bucket pass, 11 are dropped: the end
	// tells them, though it is not ten seconds since the warning.
	for range 20 {
		l.log(slog.LevelInfo, "line")
	}
	buf.Reset()
	l.close()
	if !strings.Contains(buf.String(), "11 of its lines dropped") {
		t.Fatalf("at the end: %q; want the 11 lines dropped told", buf.String())
	}
	buf.Reset()
	l.close()
	if buf.Len() != 0 {
		t.Fatalf("told twice: %q", buf.String())
	}
}

// Lines dropped where the operator logs nothing more are told all the
// same, by a timer: once a second passed since the first of them (a burst
// is told in one warning, not its first lines at once and the rest
// later), and ten since the last warning. A trial's operator logged 40 000
// lines in under a second: 913 were told at once, the other 38 018 47 s
// later, when it logged again — never, had it not.
func TestLogLimiterTimer(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	type armed struct {
		d time.Duration
		f func()
	}
	var timers []armed
	l := newLogLimiter(testLogger(&buf), "op", 2)
	l.now = func() time.Time { return now }
	l.after = func(d time.Duration, f func()) func() bool {
		timers = append(timers, armed{d, f})
		return func() bool { return true }
	}
	l.last = now
	for range 25 {
		l.log(slog.LevelInfo, "line")
	}
	now = now.Add(500 * time.Millisecond) // a token back: a line let through
	for range 10 {
		l.log(slog.LevelInfo, "line")
	}
	if len(timers) != 1 || timers[0].d != logWarnAfter || strings.Contains(buf.String(), "dropped") {
		t.Fatalf("timers %v, log:\n%s\nwant one timer of %v and no warning yet", timers, buf.String(), logWarnAfter)
	}
	now = now.Add(500 * time.Millisecond)
	timers[0].f()
	if !strings.Contains(buf.String(), "14 of its lines dropped") {
		t.Fatalf("at the timer: %q; want the 14 lines dropped told in one warning", buf.String())
	}
	// Two seconds later, 5 lines let through and 15 dropped: told ten
	// seconds after the warning.
	buf.Reset()
	now = now.Add(2 * time.Second)
	for range 20 {
		l.log(slog.LevelInfo, "line")
	}
	if len(timers) != 2 || timers[1].d != 8*time.Second {
		t.Fatalf("timers %v; want a second one of 8s", timers)
	}
	now = now.Add(8 * time.Second)
	timers[1].f()
	if !strings.Contains(buf.String(), "15 of its lines dropped") {
		t.Fatalf("at the second timer: %q; want the 15 lines dropped told", buf.String())
	}
	// Closed, the instance's end tells what is left; a timer after it,
	// nothing.
	buf.Reset()
	for range 25 { // 8 s of tokens: 16 let through, 9 dropped
		l.log(slog.LevelInfo, "line")
	}
	l.close()
	if len(timers) != 3 {
		t.Fatalf("timers %v; want a third one", timers)
	}
	timers[2].f()
	if strings.Count(buf.String(), "lines dropped") != 1 || !strings.Contains(buf.String(), "9 of its lines dropped") {
		t.Fatalf("after the end: %q; want one warning, at the end, of 9 lines", buf.String())
	}
}

// An operator logging far over its rate and then nothing more has the lines
// dropped told without another line or its end: a real guest writing
// 63 MiB to stdout in one call, the instance left open.
func TestOperatorLogDropsToldWithoutAnotherLine(t *testing.T) {
	e := newEngine(t)
	h := &countingHandler{Handler: slog.NewTextHandler(&bytes.Buffer{}, nil)}
	var warn lockedBuffer
	logger := slog.New(teeHandler{h, slog.NewTextHandler(&warn, &slog.HandlerOptions{Level: slog.LevelWarn})})
	inst := instantiate(t, e, "chatty", bombs(t), Limits{}, InstanceConfig{Config: []byte("o"), Logger: logger, LogRate: 10})
	defer inst.Close(context.Background())
	if err := inst.Process(context.Background(), 0, batchOf(), newOut().emit); err != nil {
		t.Fatal(err)
	}
	lines := (DefaultMemoryBytes - PageSize + maxLogLine - 1) / maxLogLine
	re := regexp.MustCompile(`msg="operator chatty logged more than 10 lines a second: ([0-9]+) of its lines dropped"`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		dropped := 0
		for _, w := range re.FindAllStringSubmatch(warn.String(), -1) {
			n, _ := strconv.Atoi(w[1])
			dropped += n
		}
		h.mu.Lock()
		logged := h.records
		h.mu.Unlock()
		if dropped == lines-logged {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d lines logged, warnings told %d dropped, want %d:\n%s", logged, lines, dropped, lines-logged, warn.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lockedBuffer is a bytes.Buffer a timer's goroutine writes to while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// An operator writing 63 MiB to stdout in one call, about 16 000 lines,
// logs its burst and warnings counting the rest exactly; at no limit
// (weir exec) it logs every line (TestHugeStdoutWrite).
func TestOperatorLogIsRateLimited(t *testing.T) {
	e := newEngine(t)
	h := &countingHandler{Handler: slog.NewTextHandler(&bytes.Buffer{}, nil)}
	var warn bytes.Buffer
	logger := slog.New(teeHandler{h, slog.NewTextHandler(&warn, &slog.HandlerOptions{Level: slog.LevelWarn})})
	inst := instantiate(t, e, "chatty", bombs(t), Limits{}, InstanceConfig{Config: []byte("o"), Logger: logger, LogRate: 10})
	start := time.Now()
	if err := inst.Process(context.Background(), 0, batchOf(), newOut().emit); err != nil {
		t.Fatal(err)
	}
	inst.Close(context.Background())
	lines := (DefaultMemoryBytes - PageSize + maxLogLine - 1) / maxLogLine
	// The warnings: one as the first line after the burst passes (a
	// tenth of a second in, on a slow machine), and one at the end; they
	// count every line dropped, once.
	warnings := regexp.MustCompile(`msg="operator chatty logged more than 10 lines a second: ([0-9]+) of its lines dropped"`).FindAllStringSubmatch(warn.String(), -1)
	dropped := 0
	for _, w := range warnings {
		n, _ := strconv.Atoi(w[1])
		dropped += n
	}
	logged := h.records
	most := 100 + int(time.Since(start).Seconds()*10) + 1
	if logged < 100 || logged > most {
		t.Fatalf("%d of %d lines logged; want 100 (the burst) to %d", logged, lines, most)
	}
	if most := 2 + int(time.Since(start)/logWarnEvery); len(warnings) == 0 || len(warnings) > most || dropped != lines-logged {
		t.Fatalf("warnings %q count %d dropped; want 1 to %d counting %d", warn.String(), dropped, most, lines-logged)
	}
}

// teeHandler hands each record to both handlers.
type teeHandler struct{ a, b slog.Handler }

func (t teeHandler) Enabled(context.Context, slog.Level) bool { return true }
func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	_ = t.a.Handle(ctx, r)
	if t.b.Enabled(ctx, r.Level) {
		_ = t.b.Handle(ctx, r)
	}
	return nil
}
func (t teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{t.a.WithAttrs(as), t.b.WithAttrs(as)}
}
func (t teeHandler) WithGroup(g string) slog.Handler {
	return teeHandler{t.a.WithGroup(g), t.b.WithGroup(g)}
}
