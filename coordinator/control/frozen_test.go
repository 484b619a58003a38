package control

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// syncBuf is a log's buffer that goroutines may share.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// A coordinator that was not running itself (weir up stopped with kill
// -STOP for 20 s) declares no worker lost as it resumes: a trial's
// declared all three lost in the same millisecond and failed the job
// over naming one, while their heartbeats waited to be read. Each worker
// gets a whole heartbeat timeout from the resumption; one that stays
// silent for it is lost then. The heartbeat checks are called here with
// a clock that moves only as the test says.
func TestFrozenCoordinatorDeclaresNoWorkerLost(t *testing.T) {
	nc := embeddedtest.Conn(t)
	clock := &manualClock{now: time.Unix(1_000_000, 0)}
	const timeout, period = 4 * time.Second, time.Second
	l := &liveness{joined: make(chan string, 4), lost: make(chan string, 4), beats: make(chan string, 4)}
	var log syncBuf
	co := NewCoordinator(nc, l, CoordinatorOptions{HeartbeatTimeout: timeout, Now: clock.Now,
		Log: slog.New(slog.NewTextHandler(&log, nil))})
	co.runClock = clock.Now // the checks' own pace: as the test calls them
	lost := func() []string {
		var ids []string
		for {
			select {
			case id := <-l.lost:
				ids = append(ids, id)
			default:
				return ids
			}
		}
	}
	co.seen(WorkerInfo{ID: "w1"}, nil)
	co.seen(WorkerInfo{ID: "w2"}, nil)
	co.checkHeartbeats(period)
	clock.advance(period)
	co.checkHeartbeats(period)

	// Frozen for 20 s: the first check after it finds both workers 21 s
	// late, and declares neither lost.
	clock.advance(20 * time.Second)
	co.checkHeartbeats(period)
	if ids := lost(); len(ids) != 0 {
		t.Fatalf("workers %v declared lost as the coordinator resumed", ids)
	}
	if s := log.String(); !strings.Contains(s, "coordinator was not running") || !strings.Contains(s, "for=20s") {
		t.Fatalf("log %q: want a line saying the coordinator was not running for 20s", s)
	}
	// w1 is heard; w2 stays silent and is lost a heartbeat timeout after
	// the resumption, not before.
	for i := 0; i < 4; i++ {
		clock.advance(period)
		co.seen(WorkerInfo{ID: "w1"}, nil)
		co.checkHeartbeats(period)
		if ids := lost(); len(ids) != 0 {
			t.Fatalf("%s after the resumption: workers %v declared lost, within a heartbeat timeout of it", time.Duration(i+1)*period, ids)
		}
	}
	clock.advance(period)
	co.seen(WorkerInfo{ID: "w1"}, nil)
	co.checkHeartbeats(period)
	if ids := lost(); len(ids) != 1 || ids[0] != "w2" {
		t.Fatalf("a heartbeat timeout after the resumption, lost %v; want w2, which stayed silent", ids)
	}
}
