package embeddedtest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReplicaReads counts the JetStream requests of one connection that a
// lagging replica may answer: direct gets (any replica answers them) and
// consumer creations (a consumer may be placed on any replica). The
// direct batch gets of an object's chunks are not counted: the leader's
// info says how many chunks there are, and the reader takes what a
// replica lacks from the leader.
type ReplicaReads struct {
	t                 testing.TB
	nc                *nats.Conn
	inbox             string // the prefix of nc's reply subjects
	direct, consumers *nats.Subscription
}

// WatchReplicaReads starts counting nc's requests (ReplicaReads): from
// when it returns.
func WatchReplicaReads(t testing.TB, nc *nats.Conn) *ReplicaReads {
	t.Helper()
	inbox := nc.NewRespInbox()
	w := &ReplicaReads{t: t, nc: nc, inbox: inbox[:strings.LastIndexByte(inbox, '.')+1]}
	var err error
	if w.direct, err = nc.SubscribeSync(jetstream.DefaultAPIPrefix + "DIRECT.GET.>"); err != nil {
		t.Fatal(err)
	}
	if w.consumers, err = nc.SubscribeSync(jetstream.DefaultAPIPrefix + "CONSUMER.CREATE.>"); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

// Counts returns the direct gets (but of object chunk batches) and the
// consumer creations the connection requested so far. The requests went
// through the connection's own server, as did the subscriptions: once a
// flush is answered, they have all arrived.
func (w *ReplicaReads) Counts() (direct, consumers int) {
	w.t.Helper()
	if err := w.nc.Flush(); err != nil {
		w.t.Fatal(err)
	}
	return w.count(w.direct, chunkBatch), w.count(w.consumers, nil)
}

func (w *ReplicaReads) count(sub *nats.Subscription, but func(*nats.Msg) bool) int {
	n := 0
	for {
		m, err := sub.NextMsg(0)
		if err != nil {
			return n
		}
		if strings.HasPrefix(m.Reply, w.inbox) && (but == nil || !but(m)) {
			n++
		}
	}
}

// chunkBatch reports whether m asks for a batch of an object's chunks
// (subject $O.<bucket>.C.<nuid>).
func chunkBatch(m *nats.Msg) bool {
	var req struct {
		NextFor string `json:"next_by_subj"`
		Batch   int    `json:"batch"`
	}
	return json.Unmarshal(m.Data, &req) == nil && req.Batch > 0 &&
		strings.HasPrefix(req.NextFor, "$O.") && strings.Contains(req.NextFor, ".C.")
}
