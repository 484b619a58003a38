package wasm

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DefaultLogRate is how many lines an instance logs per second, its
// weir_log lines and its stdout and stderr lines together, unless
// InstanceConfig.LogRate says otherwise; it may log ten seconds' worth at
// once (the burst) before the rate applies. An operator that logs every
// record at volume would otherwise fill the host's log, and its disk:
// the lines over the rate are dropped, and a warning says how many.
const DefaultLogRate = 100

// logBurstSeconds is the burst of a logLimiter, in seconds of its rate.
const logBurstSeconds = 10

// logWarnEvery is how often at most a logLimiter warns of the lines it
// dropped: an operator logging at many times the rate would otherwise
// have a warning before each line let through.
const logWarnEvery = 10 * time.Second

// logWarnAfter is how long after the first line it drops a logLimiter
// waits before it warns of them: a burst of lines over the rate is told in
// one warning, not its first few hundred lines at once and the rest later.
const logWarnAfter = time.Second

// logLimiter is a token bucket over the lines one instance logs. The
// lines it drops are counted and told in a warning once logWarnAfter
// passed since the first of them and logWarnEvery since the last warning
// — before the next line it lets through, or by a timer then where the
// operator logs nothing more (a trial's count came 47 s late, when the
// operator logged again) — and at the instance's end (close).
type logLimiter struct {
	logger   *slog.Logger
	operator string
	rate     float64 // lines per second; 0: no limit

	mu        sync.Mutex
	tokens    float64
	last      time.Time
	dropped   int64     // since the last warning
	firstDrop time.Time // when the first of them was dropped
	warned    time.Time // the last warning's time
	timer     func() bool
	closed    bool
	now       func() time.Time
	// after calls f after d (time.AfterFunc), returning what stops it.
	after func(d time.Duration, f func()) (stop func() bool)
}

func newLogLimiter(logger *slog.Logger, operator string, rate int) *logLimiter {
	l := &logLimiter{logger: logger, operator: operator, now: time.Now,
		after: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }}
	switch {
	case rate == 0:
		rate = DefaultLogRate
	case rate < 0:
		return l
	}
	l.rate = float64(rate)
	l.tokens = l.rate * logBurstSeconds
	l.last = l.now()
	return l
}

// log logs one line of the operator at level with args, unless it is
// over the rate.
func (l *logLimiter) log(level slog.Level, msg string, args ...any) {
	if l.rate > 0 {
		l.mu.Lock()
		now := l.now()
		l.tokens = min(l.tokens+now.Sub(l.last).Seconds()*l.rate, l.rate*logBurstSeconds)
		l.last = now
		if l.tokens < 1 {
			if l.dropped == 0 {
				l.firstDrop = now
				if l.timer == nil && !l.closed {
					l.timer = l.after(l.warnAt().Sub(now), l.tell)
				}
			}
			l.dropped++
			l.mu.Unlock()
			return
		}
		l.tokens--
		var dropped int64
		if l.dropped > 0 && !now.Before(l.warnAt()) {
			dropped, l.dropped, l.warned = l.dropped, 0, now
		}
		l.mu.Unlock()
		if dropped > 0 {
			l.warnDropped(dropped)
		}
	}
	l.logger.Log(context.Background(), level, msg, args...)
}

// warnAt is when the lines dropped since the last warning are told: once
// logWarnAfter passed since the first of them and logWarnEvery since the
// last warning. l.mu is held.
func (l *logLimiter) warnAt() time.Time {
	at := l.firstDrop.Add(logWarnAfter)
	if !l.warned.IsZero() && l.warned.Add(logWarnEvery).After(at) {
		at = l.warned.Add(logWarnEvery)
	}
	return at
}

// tell is the timer's: it tells the lines dropped since the last warning,
// or, where a warning before a line let through told them, waits for those
// dropped since.
func (l *logLimiter) tell() {
	l.mu.Lock()
	l.timer = nil
	if l.closed || l.dropped == 0 {
		l.mu.Unlock()
		return
	}
	now := l.now()
	if at := l.warnAt(); now.Before(at) {
		l.timer = l.after(at.Sub(now), l.tell)
		l.mu.Unlock()
		return
	}
	dropped := l.dropped
	l.dropped, l.warned = 0, now
	l.mu.Unlock()
	l.warnDropped(dropped)
}

// close tells the lines dropped since the last warning.
func (l *logLimiter) close() {
	l.mu.Lock()
	dropped := l.dropped
	l.dropped, l.closed = 0, true
	if l.timer != nil {
		l.timer()
		l.timer = nil
	}
	l.mu.Unlock()
	if dropped > 0 {
		l.warnDropped(dropped)
	}
}

func (l *logLimiter) warnDropped(n int64) {
	l.logger.Warn(fmt.Sprintf("operator %s logged more than %g lines a second: %d of its lines dropped", l.operator, l.rate, n),
		"operator", l.operator, "dropped", n)
}
