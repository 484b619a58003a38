package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// laggingReplica answers the direct gets of stream (which itself allows
// none) as a replica behind the leader does: with the chunks it has,
// those at or below seq have, and nothing after. It reads them from the
// stream through the leader (js).
func laggingReplica(t *testing.T, nc *nats.Conn, js jetstream.JetStream, stream string, have *atomic.Uint64, asked *atomic.Int64) {
	t.Helper()
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := nc.Subscribe(jetstream.DefaultAPIPrefix+"DIRECT.GET."+stream, func(m *nats.Msg) {
		asked.Add(1)
		var req struct {
			Seq     uint64 `json:"seq"`
			NextFor string `json:"next_by_subj"`
			Batch   int    `json:"batch"`
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("direct get request %q: %v", m.Data, err)
			return
		}
		seq, sent := req.Seq, 0
		for sent < max(req.Batch, 1) {
			sm, err := st.GetMsg(context.Background(), seq, jetstream.WithGetMsgSubject(req.NextFor))
			if err != nil || sm.Sequence > have.Load() {
				break
			}
			r := nats.NewMsg(m.Reply)
			r.Header.Set("Nats-Num-Pending", "0")
			r.Header.Set(jetstream.StreamHeader, stream)
			r.Header.Set(jetstream.SequenceHeader, strconv.FormatUint(sm.Sequence, 10))
			r.Header.Set(jetstream.TimeStampHeaer, sm.Time.Format(time.RFC3339Nano))
			r.Header.Set(jetstream.SubjectHeader, sm.Subject)
			r.Data = sm.Data
			if err := nc.PublishMsg(r); err != nil {
				return
			}
			seq, sent = sm.Sequence+1, sent+1
		}
		end := nats.NewMsg(m.Reply)
		if sent == 0 {
			end.Header.Set("Status", "404")
			end.Header.Set("Description", "Message Not Found")
		} else {
			end.Header.Set("Status", "204")
			end.Header.Set("Description", "EOB")
		}
		nc.PublishMsg(end)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// An object is read in direct batches, which any replica answers; what
// a replica behind the leader lacks — the object's last chunks, or all of
// them — comes from the leader, and the object is read whole: the client's
// own read took such a replica's end for the object's and cut it short.
func TestObjectReadTakesWhatALaggingReplicaLacksFromTheLeader(t *testing.T) {
	nc, js := embeddedtest.Connect(t, embeddedtest.Server(t, embedded.Config{}))
	ctx := context.Background()
	obj, err := NewObjectStore(ctx, js, DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	stream := "OBJ_" + DefaultStateBucket
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("0123456789abcdef"), 80000) // 1.25 MB: ten chunks
	if err := obj.Put(ctx, "j/chk-1/task-0", bytes.NewReader(val)); err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowDirect = false // the server stays out of direct gets: the test answers them
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var have atomic.Uint64
	var asked atomic.Int64
	laggingReplica(t, nc, js, stream, &have, &asked)
	// The stream holds the ten chunks, then the meta message: a replica
	// that has four of them, none, or all.
	first := info.State.FirstSeq
	for _, c := range []struct {
		name string
		have uint64
	}{{"four chunks", first + 3}, {"no chunk", 0}, {"every chunk", info.State.LastSeq}} {
		have.Store(c.have)
		asked.Store(0)
		got, err := ReadAll(ctx, obj, "j/chk-1/task-0")
		if err != nil || !bytes.Equal(got, val) {
			t.Errorf("%s: read %d bytes, %v; want all %d", c.name, len(got), err, len(val))
		}
		if asked.Load() == 0 {
			t.Errorf("%s: no direct get asked", c.name)
		}
	}
}
