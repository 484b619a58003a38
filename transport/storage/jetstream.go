package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/weirhq/weir/transport/natsconn"
)

// Default bucket names.
const (
	DefaultStateBucket = "weir_state"
	DefaultMetaBucket  = "weir_checkpoints"
)

// ObjectStore stores objects in a JetStream Object Store bucket.
type ObjectStore struct {
	js     jetstream.JetStream
	bucket string
	hooks  *putHooks // a test's faults in Put; nil outside tests
}

// NewObjectStore opens the object store bucket, creating it with file
// storage if it does not exist. replicas is how many servers of a cluster
// keep it: a new bucket gets max(replicas, 1), an existing one is scaled
// to replicas if that is above 0 and left as it is otherwise (so that a
// worker started without the setting does not scale down what the
// coordinator set up).
func NewObjectStore(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (*ObjectStore, error) {
	_, err := OpenObjectStore(ctx, js, jetstream.ObjectStoreConfig{
		Bucket: bucket, Storage: jetstream.FileStorage, Description: "weir checkpoint state",
	}, replicas)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	return &ObjectStore{js: js, bucket: bucket}, nil
}

// ObjectStoreOf returns the store of bucket, opened already
// (OpenObjectStore, with a configuration of its own): its puts, reads,
// listings and deletes go through the stream's leader as NewObjectStore's
// do.
func ObjectStoreOf(js jetstream.JetStream, bucket string) *ObjectStore {
	return &ObjectStore{js: js, bucket: bucket}
}

// OpenObjectStore opens cfg.Bucket, creating it with cfg (and
// max(replicas, 1) replicas) if it does not exist; an existing bucket is
// scaled to replicas if that is above 0.
func OpenObjectStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig, replicas int) (jetstream.ObjectStore, error) {
	os, err := js.ObjectStore(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		cfg.Replicas = max(replicas, 1)
		os, err = js.CreateObjectStore(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) { // created meanwhile
			os, err = js.ObjectStore(ctx, cfg.Bucket)
		}
	} else if err == nil && replicas > 0 {
		err = scale(ctx, js, "OBJ_"+cfg.Bucket, replicas)
	}
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", cfg.Bucket, err)
	}
	return os, nil
}

// OpenKeyValue is OpenObjectStore for a key-value bucket.
func OpenKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		cfg.Replicas = max(replicas, 1)
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) { // created meanwhile
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	} else if err == nil && replicas > 0 {
		err = scale(ctx, js, "KV_"+cfg.Bucket, replicas)
	}
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// scale sets the replicas of the stream behind a bucket, if they differ.
func scale(ctx context.Context, js jetstream.JetStream, stream string, replicas int) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	cfg := st.CachedInfo().Config
	if cfg.Replicas == replicas {
		return nil
	}
	was := cfg.Replicas
	cfg.Replicas = replicas
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("scale from %d to %d replicas: %w", was, replicas, err)
	}
	return nil
}

// Location names the bucket ("jetstream object store BUCKET").
func (s *ObjectStore) Location() string { return "jetstream object store " + s.bucket }

// Reachable reports ErrUnreachable while the store's NATS connection is
// down (Reacher).
func (s *ObjectStore) Reachable() error { return connReachable(s.js, s.Location()) }

// connReachable returns an error wrapping ErrUnreachable, naming the
// store at loc, unless js's connection is up.
func connReachable(js jetstream.JetStream, loc string) error {
	if nc := js.Conn(); nc != nil && !nc.IsConnected() {
		return fmt.Errorf("%s: %w: NATS connection %s", loc, ErrUnreachable, strings.ToLower(nc.Status().String()))
	}
	return nil
}

// Get opens the object, as the bucket's stream leader has it (see
// leader.go): its info from the leader's last meta message, then its
// chunks in direct batches (any replica answers those), with what a batch
// lacks from the leader, one request a chunk (objectReader). The client's
// Get reads the info with a direct get and the chunks through a consumer,
// either of which a lagging replica may serve: a snapshot just written
// would be missing (a restore from a checkpoint just completed fails, and
// the job fails over again) or cut short (its consumer ends once that has
// nothing pending). Here the leader's info says how many chunks there
// are; a replica can only have fewer. The object's size and digest are
// verified when it is read to the end. Batches read a big object at about
// the client's speed, three times the leader's one chunk a request
// (BenchmarkObjectGet: ~250 against ~80 MB/s on a 2-core machine).
func (s *ObjectStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	info, _, err := s.info(ctx, key)
	if err != nil {
		return nil, err
	}
	if info == nil || info.Deleted {
		return nil, notExist(key, jetstream.ErrObjectNotFound)
	}
	return &objectReader{ctx: ctx, s: s, key: key, info: info, digest: sha256.New()}, nil
}

// metaSubject is the subject of an object's meta messages, by the object
// store's layout (ADR-20): $O.<bucket>.M.<base64url(name)>.
func (s *ObjectStore) metaSubject(key string) string {
	return "$O." + s.bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(key))
}

// info returns the object's info and its meta message's sequence, as the
// stream's leader has them; nil, 0 when it has none.
func (s *ObjectStore) info(ctx context.Context, key string) (*jetstream.ObjectInfo, uint64, error) {
	info, seq, err := s.leaderInfo(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("storage get %s: %w", key, err)
	}
	return info, seq, nil
}

// leaderInfo is info, with errors that do not name the key.
func (s *ObjectStore) leaderInfo(ctx context.Context, key string) (*jetstream.ObjectInfo, uint64, error) {
	m, err := leaderLast(ctx, s.js, "OBJ_"+s.bucket, s.metaSubject(key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var info jetstream.ObjectInfo
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return nil, 0, fmt.Errorf("object info: %w", err)
	}
	info.ModTime = m.Time
	return &info, m.Seq, nil
}

// objectReader reads an object's chunks, a batch of them at a time, with
// the stream's direct get, which any replica answers, and from the
// stream's leader what that does not give.
//
// The info it reads by is the leader's (ObjectStore.info), so it knows
// how many chunks to expect; the chunks' subject names this one put of
// the object only (its NUID), so any chunk a replica has is one of them,
// in order. A lagging replica has fewer, or none yet: what the batch
// lacks comes from the leader, one chunk a request (the client's own read
// instead ends early, taking a replica's end for the object's). The size
// and digest are checked at the end either way.
type objectReader struct {
	ctx     context.Context
	s       *ObjectStore
	key     string
	info    *jetstream.ObjectInfo
	next    uint64 // the stream sequence to look for the next chunk from
	chunks  uint32 // chunks read
	size    uint64 // bytes read
	digest  hash.Hash
	batched [][]byte // chunks a direct batch gave, not read yet
	leader  bool     // a direct batch failed: the rest from the leader
	buf     []byte
	err     error
}

// How an objectReader's direct batches are sized and waited for.
const (
	// directChunks is the most chunks one batch asks for (4 MiB of the
	// client's 128 KiB chunks).
	directChunks = 32
	// directBytes caps a batch's answer.
	directBytes = 8 << 20
	// directWait bounds a batch: a replica that does not answer in time
	// (frozen, or gone) leaves the rest of the object to the leader.
	directWait = 2 * time.Second
)

func (r *objectReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.err = r.fill()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// fill reads the next chunk into buf; after the last one it verifies the
// size and digest and gives io.EOF.
func (r *objectReader) fill() error {
	if r.chunks == r.info.Chunks {
		if r.size != r.info.Size {
			return fmt.Errorf("storage get %s: %d bytes, its info says %d", r.key, r.size, r.info.Size)
		}
		if got := jetstream.GetObjectDigestValue(r.digest); got != r.info.Digest {
			return fmt.Errorf("storage get %s: digest %s, its info says %s", r.key, got, r.info.Digest)
		}
		return io.EOF
	}
	if len(r.batched) == 0 && !r.leader {
		r.batch()
	}
	if len(r.batched) > 0 {
		r.take(r.batched[0])
		r.batched = r.batched[1:]
		return nil
	}
	subj := "$O." + r.s.bucket + ".C." + r.info.NUID
	m, err := leaderGet(r.ctx, r.s.js, "OBJ_"+r.s.bucket, msgGetRequest{Seq: r.next, NextFor: subj})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("storage get %s: chunk %d of %d: %w (deleted meanwhile?)", r.key, r.chunks+1, r.info.Chunks, err)
	}
	if err != nil {
		return fmt.Errorf("storage get %s: chunk %d of %d: %w", r.key, r.chunks+1, r.info.Chunks, err)
	}
	r.next = m.Seq + 1
	r.take(m.Data)
	return nil
}

// take makes chunk the next one read.
func (r *objectReader) take(chunk []byte) {
	r.chunks++
	r.size += uint64(len(chunk))
	r.digest.Write(chunk)
	r.buf = chunk
}

// batch asks for the next chunks with one direct batch get, and keeps in
// batched those it gives, moving next past them. A batch that fails
// (the stream allows no direct gets, no replica answers in time) leaves
// the rest of the object to the leader; one that gives nothing (a
// replica without the next chunk yet) leaves that chunk to it.
func (r *objectReader) batch() {
	want := min(int(r.info.Chunks-r.chunks), directChunks)
	ctx, cancel := context.WithTimeout(r.ctx, directWait)
	defer cancel()
	subj := "$O." + r.s.bucket + ".C." + r.info.NUID
	msgs, err := jetstreamext.GetBatch(ctx, r.s.js, "OBJ_"+r.s.bucket, want,
		jetstreamext.GetBatchSeq(max(r.next, 1)),
		jetstreamext.GetBatchSubject(subj),
		jetstreamext.GetBatchMaxBytes(directBytes))
	if err != nil {
		r.leader = true
		return
	}
	for m, err := range msgs {
		if err != nil {
			if !errors.Is(err, jetstreamext.ErrNoMessages) {
				r.leader = true
			}
			return
		}
		if m.Subject != subj || m.Sequence < r.next {
			r.leader = true // not what was asked for: trust the leader only
			return
		}
		r.batched = append(r.batched, m.Data)
		r.next = m.Sequence + 1
	}
}

// Close ends the read; nothing is held between Reads.
func (r *objectReader) Close() error {
	r.err = errors.New("storage get " + r.key + ": read after close")
	r.buf = nil
	return nil
}

// Delete removes the objects whose names start with prefix: each one's
// chunks, and then its meta messages up to the one read (from the
// stream's leader), leaving no delete marker. The client's Delete reads
// the object's info with a direct get, which a lagging replica may answer
// with nothing (the object stays) or an older revision (its chunks stay),
// and writes a delete marker that rolls up the subject, a revision put
// meanwhile included; the marker would then have to be purged as well,
// or every listing grow with every checkpoint ever discarded. Here an
// object put again meanwhile stays. The chunks go first: a delete cut
// short leaves an object whose chunks are gone, still listed, which a
// Delete again removes, never chunks that nothing names.
//
// The names are the leader's listing (names): no watch of the whole
// bucket, no lookup but of the objects deleted.
func (s *ObjectStore) Delete(ctx context.Context, prefix string) error {
	if err := CheckPrefix(prefix); err != nil {
		return fmt.Errorf("storage delete: %w", err)
	}
	keys, err := s.names(ctx, prefix)
	if err != nil {
		return fmt.Errorf("storage delete %s: %w", prefix, err)
	}
	for _, k := range keys {
		if err := s.DeleteKey(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// DeleteKey removes the object named key, and no other, as Delete removes
// each of its objects; a key with no object is no error.
func (s *ObjectStore) DeleteKey(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return fmt.Errorf("storage delete: %w", err)
	}
	info, seq, err := s.info(ctx, key)
	if err != nil {
		return err
	}
	if info == nil {
		return nil // deleted meanwhile
	}
	if !info.Deleted && info.NUID != "" {
		if err := purge(ctx, s.js, "OBJ_"+s.bucket, "$O."+s.bucket+".C."+info.NUID, 0); err != nil {
			return fmt.Errorf("storage delete %s: chunks: %w", key, err)
		}
	}
	if err := purge(ctx, s.js, "OBJ_"+s.bucket, s.metaSubject(key), seq+1); err != nil {
		return fmt.Errorf("storage delete %s: %w", key, err)
	}
	return nil
}

// names returns the names of the objects starting with prefix that have
// meta messages, deleted ones among them, as the stream's leader has them
// (leaderSubjects): each object's meta subject holds its name.
func (s *ObjectStore) names(ctx context.Context, prefix string) ([]string, error) {
	pre := "$O." + s.bucket + ".M."
	subjects, err := leaderSubjects(ctx, s.js, "OBJ_"+s.bucket, pre+">")
	if err != nil {
		return nil, err
	}
	var keys []string
	for subj := range subjects {
		name, err := base64.URLEncoding.DecodeString(strings.TrimPrefix(subj, pre))
		if err == nil && strings.HasPrefix(string(name), prefix) {
			keys = append(keys, string(name))
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// List returns the names of live objects starting with prefix, as the
// stream's leader has them: the names of the bucket's meta subjects
// (names), and for each of them with the prefix its info, to leave out
// the deleted ones. Not a watch of the bucket, as the client's List: its
// consumer may be placed on a lagging replica, and a checkpoint just
// written would be missing — Catalog.Read would then call the newest
// checkpoint corrupt and restore an older one.
func (s *ObjectStore) List(ctx context.Context, prefix string) ([]string, error) {
	infos, err := s.Infos(ctx, prefix)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(infos))
	for i, in := range infos {
		keys[i] = in.Name
	}
	return keys, nil
}

// Infos returns the infos of the live objects whose names start with
// prefix, by name, as List finds them.
func (s *ObjectStore) Infos(ctx context.Context, prefix string) ([]*jetstream.ObjectInfo, error) {
	if err := CheckPrefix(prefix); err != nil {
		return nil, fmt.Errorf("storage list: %w", err)
	}
	names, err := s.names(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("storage list %s: %w", prefix, err)
	}
	var infos []*jetstream.ObjectInfo
	for _, k := range names {
		info, _, err := s.info(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("storage list %s: %w", prefix, err)
		}
		if info != nil && !info.Deleted {
			infos = append(infos, info)
		}
	}
	return infos, nil
}

// KV stores small objects in a JetStream Key-Value bucket (values are
// limited by the server's max payload, 1 MiB by default).
type KV struct {
	kv     jetstream.KeyValue
	js     jetstream.JetStream
	bucket string
}

// NewKV opens the KV bucket, creating it with file storage if it does not
// exist; replicas as for NewObjectStore.
func NewKV(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (*KV, error) {
	kv, err := OpenKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket: bucket, Storage: jetstream.FileStorage, Description: "weir checkpoint metadata",
	}, replicas)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	return &KV{kv: kv, js: js, bucket: bucket}, nil
}

// Location names the bucket ("jetstream kv BUCKET").
func (s *KV) Location() string { return "jetstream kv " + s.bucket }

// Reachable reports ErrUnreachable while the store's NATS connection is
// down (Reacher).
func (s *KV) Reachable() error { return connReachable(s.js, s.Location()) }

// Put stores the value; one KV put is atomic. While the bucket's stream
// has no leader (an election after its leader's server went), the put is
// published again until one stores it, each try bounded by the client's
// timeout, within ctx's deadline or, without one, natsconn.ElectionWait
// (natsconn.ThroughElection). A try that timed out may have stored the
// value: putting it again does no harm.
func (s *KV) Put(ctx context.Context, key string, r io.Reader) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	if err := natsconn.ThroughElection(ctx, s.js.Conn(), s.js.Options().DefaultTimeout, func(ctx context.Context) error {
		_, err := s.kv.Put(ctx, key, data)
		return err
	}); err != nil {
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	return nil
}

// Get returns the value, as the bucket's stream leader has it: the
// JetStream API's message get (STREAM.MSG.GET), which only the leader
// answers, not the client's Get, which uses a direct get whenever the
// bucket allows them (KV buckets do) and which in a cluster any replica
// answers — a lagging one with an older revision, or none. The values here
// are read where an old one does harm: a job record read by a restarted
// coordinator (an old state or attempt resumed), a checkpoint's metadata
// read to restore from it (a checkpoint just completed taken for missing,
// and the job restored from an older one: an exactly-once sink commits
// again what it committed after that one). They are read rarely (a
// failover, a restore, a coordinator's start, a listing of checkpoints),
// so that the cost of asking the leader does not count.
func (s *KV) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	m, err := leaderLast(ctx, s.js, "KV_"+s.bucket, "$KV."+s.bucket+"."+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, notExist(key, jetstream.ErrKeyNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("storage get %s: %w", key, err)
	}
	if m.deleted() {
		return nil, notExist(key, jetstream.ErrKeyDeleted)
	}
	return io.NopCloser(bytes.NewReader(m.Data)), nil
}

// Delete removes the keys starting with prefix: it purges each key's
// subject in the bucket's stream through the key's last revision, leaving
// no delete marker (a marker per key that nothing removes would make the
// bucket, and every listing of it, grow with every checkpoint ever
// discarded). A key put again meanwhile stays.
//
// Not a KV purge followed by a purge of its marker, as before: after a
// crash (kill -9, power loss), nats-server v2.15.2's file store recovered
// without the removals of that pair, so deleted keys came back
// (TestDeletesSurviveAServerCrash). One subject purge survives.
//
// The keys are the leader's listing (subjects), and each key's last
// revision is read from the leader, not with a direct get (which KV
// buckets allow, and which in a cluster any replica answers, a lagging
// one with an older revision or none): a key put just before would be
// left, or left at its latest revision.
func (s *KV) Delete(ctx context.Context, prefix string) error {
	if err := CheckPrefix(prefix); err != nil {
		return fmt.Errorf("storage delete: %w", err)
	}
	keys, err := s.keys(ctx, prefix)
	if err != nil {
		return fmt.Errorf("storage delete %s: %w", prefix, err)
	}
	for _, k := range keys {
		if err := s.deleteKey(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// DeleteKey removes key, and no other, as Delete removes each of its keys;
// a key that is not there is no error.
func (s *KV) DeleteKey(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return fmt.Errorf("storage delete: %w", err)
	}
	return s.deleteKey(ctx, key)
}

func (s *KV) deleteKey(ctx context.Context, key string) error {
	subj := "$KV." + s.bucket + "." + key
	seq, err := lastSeq(ctx, s.js, "KV_"+s.bucket, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // deleted meanwhile
	}
	if err == nil {
		err = purge(ctx, s.js, "KV_"+s.bucket, subj, seq+1)
	}
	if err != nil {
		return fmt.Errorf("storage delete %s: %w", key, err)
	}
	return nil
}

// keys returns the keys starting with prefix that have messages, deleted
// ones among them, as the stream's leader has them (leaderSubjects).
func (s *KV) keys(ctx context.Context, prefix string) ([]string, error) {
	pre := "$KV." + s.bucket + "."
	subjects, err := leaderSubjects(ctx, s.js, "KV_"+s.bucket, pre+">")
	if err != nil {
		return nil, err
	}
	var keys []string
	for subj := range subjects {
		if k := strings.TrimPrefix(subj, pre); strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// List returns the live keys starting with prefix, sorted, as the
// stream's leader has them: the bucket's subjects (keys), and for each of
// them with the prefix its last revision, to leave out the deleted ones.
// Not a watch, as the client's Keys: its consumer may be placed on a
// lagging replica, and a checkpoint's metadata just written would be
// missing — a restarted job's coordinator would restore an older
// checkpoint than the newest completed one (Catalog.IDs).
func (s *KV) List(ctx context.Context, prefix string) ([]string, error) {
	if err := CheckPrefix(prefix); err != nil {
		return nil, fmt.Errorf("storage list: %w", err)
	}
	all, err := s.keys(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("storage list %s: %w", prefix, err)
	}
	keys := all[:0]
	for _, k := range all {
		m, err := leaderLast(ctx, s.js, "KV_"+s.bucket, "$KV."+s.bucket+"."+k)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("storage list %s: %w", prefix, err)
		}
		if !m.deleted() {
			keys = append(keys, k)
		}
	}
	return keys, nil
}
