package sink

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/subject"
)

// A task that comes back after the stream's duplicate window — a worker or
// `weir up` down for minutes in the middle of a commit — finds part of the
// checkpoint stored and the stream no longer recognizing its ids: the
// recovery reads back what is there and publishes only the rest, so every
// record is stored once, in order. In each mode the cut commit stored the
// first 40 of 100 records (4 atomic batches of 10).
func TestRecoverPastTheDuplicateWindow(t *testing.T) {
	for _, c := range []struct {
		mode      PublishMode
		transform bool   // the stream stores "out" as "stored.out"
		keyed     string // the sink publishes on this keyed subject ("": on "out")
	}{{PublishFast, false, ""}, {PublishAtomic, false, ""}, {PublishAsync, false, ""}, {PublishFast, true, ""},
		{PublishFast, false, "out.{key}"}, {PublishAtomic, false, "out.{key}"},
		{PublishFast, false, "out.{key}.v1"}, {PublishAtomic, false, "out.{key}.v1"}} {
		mode := c.mode
		name := string(mode)
		if c.transform {
			name += "/transformed"
		}
		if c.keyed != "" {
			name += "/" + c.keyed
		}
		t.Run(name, func(t *testing.T) {
			scfg := outStream(mode)
			scfg.Duplicates = 300 * time.Millisecond
			if c.transform {
				scfg.SubjectTransform = &jetstream.SubjectTransformConfig{Source: "out", Destination: "stored.out"}
			}
			if c.keyed != "" {
				tm, err := subject.Parse(c.keyed)
				must(t, err)
				scfg.Subjects = []string{tm.Filter()}
			}
			nc, js, ctx := outSetup(t, scfg)
			cfg := ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0", Publish: mode, BatchSize: 10}
			if c.keyed != "" {
				cfg.Subject = c.keyed
			}
			// The commit the crash cut: the first 40 records, with the
			// ids and batches of the whole checkpoint's.
			state := stageAndCut(t, ctx, nc, cfg)

			time.Sleep(2 * scfg.Duplicates) // the stream forgets the ids
			recoverNew(t, ctx, nc, cfg, 1, state)
			// The read-back's consumer is gone, not left until its
			// inactivity threshold: a recovery per failover would pile
			// them up on the stream.
			stream, err := js.Stream(ctx, "OUT")
			must(t, err)
			for ci := range stream.ListConsumers(ctx).Info() {
				t.Errorf("consumer %s left on the stream after the recovery", ci.Name)
			}
			ids, values := streamIDs(t, ctx, js, "OUT")
			if strings.Join(values, ",") != strings.Join(wantValues(0, 100), ",") {
				t.Fatalf("stream holds %d messages %v, want v0..v99 once each", len(values), values)
			}
			if ids[99] == "" && mode != PublishAtomic {
				t.Errorf("last message without an id")
			}
		})
	}
}

// parseID reads the ids msgID makes for this task, and no other task's.
func TestParseID(t *testing.T) {
	s := &ExactlyOnce{prefix: "j/sink0/"}
	for id, want := range map[string]struct {
		ckpt  int64
		index int
		ok    bool
	}{
		"j/sink0/12/34": {12, 34, true},
		"j/sink0/end/3": {EndCheckpointID, 3, true},
		"j/sink1/12/34": {0, 0, false},
		"j/sink0/12":    {0, 0, false},
		"j/sink0/x/1":   {0, 0, false},
		"j/sink0/1/y":   {0, 0, false},
		"":              {0, 0, false},
		"j/sink0/-5/-1": {-5, -1, true},
	} {
		c, i, ok := s.parseID(id)
		if c != want.ckpt || i != want.index || ok != want.ok {
			t.Errorf("parseID(%q) = %d, %d, %v; want %+v", id, c, i, ok, want)
		}
	}
}

// Past the duplicate window, on a stream that keeps one message per
// subject, a commit that was stored whole but not confirmed leaves only
// the latest record of each subject to be found: the recovery must not
// publish the older ones again over them. Two checkpoints, the first's
// records all replaced by the second's; keyed and on one subject, in
// every publish mode (atomic batches of 10, whose first messages the limit
// replaces too).
func TestRecoverPastTheWindowWithPerSubjectLimits(t *testing.T) {
	for _, mode := range []PublishMode{PublishFast, PublishAsync, PublishAtomic} {
		for _, keyed := range []bool{false, true} {
			name := string(mode)
			if keyed {
				name += "/keyed"
			}
			t.Run(name, func(t *testing.T) {
				scfg := outStream(mode)
				scfg.Duplicates, scfg.MaxMsgsPerSubject = 300*time.Millisecond, 1
				cfg := ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0", Publish: mode, BatchSize: 10}
				if keyed {
					scfg.Subjects, cfg.Subject = []string{"out.>"}, "out.{key}"
				}
				nc, js, ctx := outSetup(t, scfg)
				a, err := NewExactlyOnce(ctx, nc, cfg)
				must(t, err)
				defer a.Close()
				must(t, a.Write(ctx, batchOf(0, 30)))
				_, err = a.PreCommit(ctx, 1)
				must(t, err)
				must(t, a.Write(ctx, batchOf(30, 100)))
				state, err := a.PreCommit(ctx, 2)
				must(t, err)
				// Both commits stored whole, neither confirmed: the crash
				// came before the acknowledgement.
				st, err := decodeState(state)
				must(t, err)
				must(t, a.publish(ctx, a.prefix, st))

				time.Sleep(2 * scfg.Duplicates) // the stream forgets the ids
				recoverNew(t, ctx, nc, cfg, 2, state)
				_, values := streamIDs(t, ctx, js, "OUT")
				want := "v97,v98,v99" // the latest of k1, k2, k0, in the order they were stored
				if !keyed {
					want = "v99"
				}
				if got := strings.Join(values, ","); got != want {
					t.Fatalf("stream holds %s, want %s", got, want)
				}
			})
		}
	}
}

// With atomic batches on a stream that keeps a few messages per subject,
// the limit can replace a batch's first message (the one whose id stands
// for the batch) while the batch's newer records stay: its last message
// carries an id too, so the recovery finds the batch and does not store
// its records twice. Batch A: y, then z×9; batch B: x, z, then x×8; five
// per subject keep A's y, B's last x but not its first, and z from both.
func TestRecoverPastTheWindowFindsAnAtomicBatchByItsLastID(t *testing.T) {
	scfg := outStream(PublishAtomic)
	scfg.Subjects, scfg.Duplicates, scfg.MaxMsgsPerSubject = []string{"out.>"}, 300*time.Millisecond, 5
	cfg := ExactlyOnceConfig{Stream: "OUT", Subject: "out.{key}", Job: "j", Task: "sink0", Publish: PublishAtomic, BatchSize: 10}
	nc, js, ctx := outSetup(t, scfg)
	a, err := NewExactlyOnce(ctx, nc, cfg)
	must(t, err)
	defer a.Close()
	var b abi.Builder
	for i := 0; i < 20; i++ {
		key := "z"
		switch {
		case i == 0:
			key = "y"
		case i == 10 || i > 11:
			key = "x"
		}
		b.Add([]byte(key), []byte("v"+strconv.Itoa(i)), 0)
	}
	must(t, a.Write(ctx, b.Bytes()))
	state, err := a.PreCommit(ctx, 1)
	must(t, err)
	st, err := decodeState(state)
	must(t, err)
	must(t, a.publish(ctx, a.prefix, st)) // stored whole, not confirmed
	time.Sleep(2 * scfg.Duplicates)
	recoverNew(t, ctx, nc, cfg, 1, state)
	_, values := streamIDs(t, ctx, js, "OUT")
	seen := map[string]bool{}
	for _, v := range values {
		if seen[v] {
			t.Fatalf("stream holds %s twice: %v", v, values)
		}
		seen[v] = true
	}
}
