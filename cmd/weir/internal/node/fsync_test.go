package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/transport/sink"
)

// On weir up -sync always (every JetStream write fsynced) an at-least-once
// sink in publish mode auto publishes atomic batches, one fsync each,
// where its stream allows atomic publish — the coordinator tells its
// workers in the deploy, and the job status says so; on the default server
// it keeps fast batches. An atomic batch's first message carries a message
// id, a fast batch's none: the output stream shows which the sink took.
func TestAtLeastOnceSinksOnAServerThatFsyncsEveryWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	mod := filepath.Join(dir, "uppercase.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/uppercase"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sync := range []bool{true, false} {
		t.Run(fmt.Sprintf("sync-always=%v", sync), func(t *testing.T) {
			n, err := Start(ctx, Options{DataDir: t.TempDir(), Port: -1, SyncAlways: sync, Coordinator: true, Workers: 1, WorkerID: "w1",
				HeartbeatTimeout: testHeartbeatTimeout, HeartbeatInterval: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
			mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}, AllowAtomicPublish: true, AllowBatchPublish: true})
			const count = 200
			for i := range count {
				mustPublish(t, ctx, n.JS, "in", fmt.Sprintf("m%03d", i))
			}
			spec, err := jobspec.Parse("alo.yaml", []byte(`name: alo
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: upper, module: `+mod+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, guarantee: at-least-once, input: {from: upper}}]
checkpointing: {interval: 50ms}
restart: {strategy: none}
`), jobspec.Options{})
			if err != nil {
				t.Fatal(err)
			}
			st, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec})
			if err != nil {
				t.Fatal(err)
			}
			note := "; the server fsyncs every write, so published in atomic batches if stream OUT allows atomic publish"
			var g string
			for _, x := range st.Guarantees {
				if x.Role == "sink" && x.Name == "out" {
					g = x.Text
				}
			}
			if st.FsyncEachWrite != sync || !strings.HasPrefix(g, sink.AtLeastOnceGuarantee) || strings.HasSuffix(g, note) != sync {
				t.Errorf("status says the server fsyncs every write: %v, and of the sink: %q", st.FsyncEachWrite, g)
			}
			waitUntil(t, ctx, "the output", func() bool { return streamMsgs(t, ctx, n.JS, "OUT") >= count })
			out, err := n.JS.Stream(ctx, "OUT")
			if err != nil {
				t.Fatal(err)
			}
			first, err := out.GetMsg(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if string(first.Data) != "M000" {
				t.Fatalf("first output %q, want M000", first.Data)
			}
			if id := first.Header.Get(jetstream.MsgIDHeader); (id != "") != sync {
				t.Errorf("the first output message's id is %q: want one (an atomic batch's) with sync always, none (a fast batch's) without", id)
			}
		})
	}
}
