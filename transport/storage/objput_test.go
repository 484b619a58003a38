package storage

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// randomObject returns n bytes that no chunk of repeats another.
func randomObject(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// quickStore returns an object store on a fresh server whose client gives
// up waiting for an acknowledgement after half a second (so that a
// dropped one is noticed soon), with hooks of its own, and the
// connection.
func quickStore(t *testing.T, ctx context.Context) (*ObjectStore, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, _ := embeddedtest.Connect(t, embeddedtest.Server(t, embedded.Config{}))
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewObjectStore(ctx, js, DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.hooks = &putHooks{}
	return s, nc, js
}

// streamMsgs returns how many messages the bucket's stream holds, as its
// leader has them.
func streamMsgs(t *testing.T, ctx context.Context, s *ObjectStore) uint64 {
	t.Helper()
	var resp struct {
		State struct {
			Msgs uint64 `json:"messages"`
		} `json:"state"`
	}
	if err := apiRequest(ctx, s.js, "STREAM.INFO.OBJ_"+s.bucket, nil, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.State.Msgs
}

// readBack checks that both this package's reader and the object store
// client read key as data: Put writes the client's layout.
func readBack(t *testing.T, ctx context.Context, s *ObjectStore, key string, data []byte) {
	t.Helper()
	got, err := ReadAll(ctx, s, key)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, %v; want the %d put", len(got), err, len(data))
	}
	client, err := s.js.ObjectStore(ctx, s.bucket)
	if err != nil {
		t.Fatal(err)
	}
	got, err = client.GetBytes(ctx, key)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the object store client read %d bytes, %v; want the %d put", len(got), err, len(data))
	}
}

// An object Put writes is the object store client's: its info (the
// client's GetInfo) names the put's chunks, size, digest and chunk size,
// and the client reads it back, a big one and an empty one. The bucket's
// stream has a duplicate window longer than a chunk is published again
// under one message ID, so that no try of a chunk stored already is
// stored again.
func TestObjectPutWritesTheClientsLayout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, _, js := quickStore(t, ctx)
	data := randomObject(3*chunkSize + 100)
	if err := s.Put(ctx, "j/chk-1/a-0", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "j/chk-1/empty", bytes.NewReader(nil)); err != nil {
		t.Fatal(err)
	}
	readBack(t, ctx, s, "j/chk-1/a-0", data)
	readBack(t, ctx, s, "j/chk-1/empty", nil)
	client, err := js.ObjectStore(ctx, s.bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := client.GetInfo(ctx, "j/chk-1/a-0")
	if err != nil {
		t.Fatal(err)
	}
	if info.Chunks != 4 || info.Size != uint64(len(data)) || info.NUID == "" || info.Opts == nil || info.Opts.ChunkSize != chunkSize ||
		!strings.HasPrefix(info.Digest, "SHA-256=") || info.Bucket != s.bucket {
		t.Errorf("info %+v; want 4 chunks of %d bytes, %d bytes, a NUID and a SHA-256 digest", info, chunkSize, len(data))
	}
	if n := streamMsgs(t, ctx, s); n != 4+1+1 {
		t.Errorf("%d messages in the stream; want 6: four chunks and two infos", n)
	}
	st, err := js.Stream(ctx, "OBJ_"+s.bucket)
	if err != nil {
		t.Fatal(err)
	}
	if w := st.CachedInfo().Config.Duplicates; w < putDedupSpan {
		t.Errorf("the bucket's duplicate window is %v; want at least %v", w, putDedupSpan)
	}
}

// A chunk whose acknowledgement is lost (the stream stored it, and its
// leader's server went before answering) is published again, under the
// same message ID, and the stream does not store it a second time: the
// object would read with that chunk twice.
func TestObjectPutStoresAChunkWhoseAckWasLostOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, nc, _ := quickStore(t, ctx)
	var mu sync.Mutex
	dropped := 0
	s.hooks.dropAck = func(index uint32, gen, try int) bool {
		mu.Lock()
		defer mu.Unlock()
		if index == 2 && try == 1 {
			dropped++
			return true
		}
		return false
	}
	published, err := nc.SubscribeSync("$O." + s.bucket + ".C.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	data := randomObject(5 * chunkSize)
	if err := s.Put(ctx, "j/chk-1/a-0", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	d := dropped
	mu.Unlock()
	if n, _, _ := published.Pending(); d != 1 || n != 6 {
		t.Fatalf("%d acknowledgements dropped, %d chunks published; want one dropped, and its chunk published again (6)", d, n)
	}
	if n := streamMsgs(t, ctx, s); n != 5+1 {
		t.Errorf("%d messages in the stream; want 6: five chunks, each once, and the info", n)
	}
	readBack(t, ctx, s, "j/chk-1/a-0", data)
}

// A chunk that the stream did not store (no leader when it was
// published) while the chunks after it were (a leader elected just
// after) is published again, and stored after them: the chunks' order in
// the stream is the object's, so each of those is deleted and published
// again after it, under a new message ID. The object reads back whole,
// and the stream holds each chunk once.
func TestObjectPutRestoresTheChunksOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, _, _ := quickStore(t, ctx)
	var mu sync.Mutex
	regenerated := map[uint32]bool{}
	s.hooks.dropPublish = func(index uint32, gen, try int) bool {
		mu.Lock()
		defer mu.Unlock()
		if gen > 0 {
			regenerated[index] = true
		}
		return index == 1 && try == 1
	}
	data := randomObject(6*chunkSize + 7)
	if err := s.Put(ctx, "j/chk-1/a-0", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := len(regenerated)
	mu.Unlock()
	if n != 5 {
		t.Errorf("%d chunks published again under a new message ID; want the five stored before chunk 2", n)
	}
	if n := streamMsgs(t, ctx, s); n != 7+1 {
		t.Errorf("%d messages in the stream; want 8: seven chunks, each once, and the info", n)
	}
	readBack(t, ctx, s, "j/chk-1/a-0", data)
}

// A put while the bucket's stream has no leader (its leader's server
// gone mid-put, and a second one, so that the one left cannot elect
// one) waits for one and completes once one is elected: its chunks are
// published again, first to a server where this test's subscription is
// the only interest (no acknowledgement comes, as from a leader that
// fell silent), then to nobody (no responders). The client's put failed
// the snapshot ('nats: no response from stream', 'context deadline
// exceeded'), and with it the checkpoint, and the job over. The object
// reads back byte-identical, and the stream holds each chunk once.
func TestObjectPutWaitsForALeader(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	if _, err := NewObjectStore(ctx, js, "state", 3); err != nil {
		t.Fatal(err)
	}
	stay, stopQuorum := embeddedtest.QuorumLoss(t, ctx, js, "OBJ_state", servers)
	wnc, wjs := embeddedtest.ConnectTo(t, stay.ClientURL())
	writer, err := NewObjectStore(ctx, wjs, "state", 0)
	if err != nil {
		t.Fatal(err)
	}

	const chunks = 16
	data := randomObject(chunks*chunkSize - 5)
	half := chunks / 2 * chunkSize
	pr, pw := io.Pipe()
	defer pr.Close()
	done := make(chan error, 1)
	go func() { done <- writer.Put(ctx, "j/chk-1/a-0", pr) }()
	// The put has read the first half (a pipe's write returns once it is
	// read), and published most of it, when the servers go.
	if _, err := pw.Write(data[:half]); err != nil {
		t.Fatal(err)
	}
	published, err := wnc.SubscribeSync("$O.state.C.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	restart := stopQuorum()
	go func() {
		if _, err := pw.Write(data[half:]); err == nil {
			pw.Close()
		}
	}()
	// A chunk went out while one server of three is up.
	if _, err := published.NextMsgWithContext(ctx); err != nil {
		t.Fatalf("no chunk went out: %v", err)
	}
	if err := published.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	restart()
	if err := <-done; err != nil {
		t.Fatalf("put through a leader election: %v", err)
	}
	got, err := ReadAll(ctx, writer, "j/chk-1/a-0")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, %v after the put; want the %d put", len(got), err, len(data))
	}
	if n := streamMsgs(t, ctx, writer); n != chunks+1 {
		t.Errorf("%d messages in the stream; want %d: each chunk once, and the info", n, chunks+1)
	}
}

// Replacing an object through a server that does not lead the bucket's
// stream purges the replaced object's chunks: its info is read from the
// leader. (The client read it with a direct get, which the replica on
// the writer's server may answer without the object: its chunks stayed
// for good, named by no object.)
func TestObjectPutOnAClusterPurgesTheReplacedChunks(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, _, ro, _, _ := clusterStores(t, ctx)
	const n = 10
	for i := range n {
		data := randomObject(2*chunkSize + i)
		if err := ro.Put(ctx, "j/chk-1/a-0", bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		got, err := ReadAll(ctx, ro, "j/chk-1/a-0")
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("put %d: read %d bytes, %v; want the %d put", i, len(got), err, len(data))
		}
	}
	subjects, err := leaderSubjects(ctx, ro.js, "OBJ_state", "$O.state.C.>")
	if err != nil {
		t.Fatal(err)
	}
	if len(subjects) != 1 {
		t.Errorf("chunks of %d puts left after %d puts of one object; want the last one's", len(subjects), n)
	}
	if m := streamMsgs(t, ctx, ro); m != 3+1 {
		t.Errorf("%d messages in the stream; want 4: the last put's three chunks and its info", m)
	}
}
