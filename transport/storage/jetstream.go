package storage

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Default bucket names.
const (
	DefaultStateBucket = "weir_state"
	DefaultMetaBucket  = "weir_checkpoints"
)

// ObjectStore stores objects in a JetStream Object Store bucket.
type ObjectStore struct {
	os     jetstream.ObjectStore
	js     jetstream.JetStream
	bucket string
}

// NewObjectStore opens the object store bucket, creating it with file
// storage if it does not exist. replicas is how many servers of a cluster
// keep it: a new bucket gets max(replicas, 1), an existing one is scaled
// to replicas if that is above 0 and left as it is otherwise (so that a
// worker started without the setting does not scale down what the
// coordinator set up).
func NewObjectStore(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (*ObjectStore, error) {
	os, err := OpenObjectStore(ctx, js, jetstream.ObjectStoreConfig{
		Bucket: bucket, Storage: jetstream.FileStorage, Description: "weir checkpoint state",
	}, replicas)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	return &ObjectStore{os: os, js: js, bucket: bucket}, nil
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

// Put uploads the object in chunks; it becomes visible when complete.
//
// ctx stops the upload through the reader, not through the client: the
// client cleans up the chunks of a failed upload with the context it was
// given, so a canceled one would leave them in the bucket for good (no
// object names them, so no Delete finds them). Each request of the upload
// is bounded by the client's default timeout instead.
func (s *ObjectStore) Put(ctx context.Context, key string, r io.Reader) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if _, err := s.os.Put(context.WithoutCancel(ctx), jetstream.ObjectMeta{Name: key}, chunkReader{ctxReader{ctx, r}}); err != nil {
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	return nil
}

// chunkReader fills each Read's buffer from r, short only at r's end. The
// object store client publishes what each Read returns as one chunk, a
// message of its own: a snapshot encoded record by record through a pipe,
// a few bytes a Read, would become thousands of tiny chunks (an unaligned
// checkpoint's channel state of 100 KiB took 5000), and an upload with
// more than the client's 4000 unacknowledged at once fails the checkpoint
// ("stalled with too many outstanding async published messages").
type chunkReader struct{ r io.Reader }

func (c chunkReader) Read(p []byte) (int, error) {
	n, err := io.ReadFull(c.r, p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}

// Get opens the object; its digest is verified when it is read to the end.
func (s *ObjectStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	res, err := s.os.Get(ctx, key)
	if err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, notExist(key, err)
		}
		return nil, fmt.Errorf("storage get %s: %w", key, err)
	}
	return res, nil
}

// Delete removes the objects whose names start with prefix, and then the
// delete markers the object store leaves in their place (see dropMarker).
func (s *ObjectStore) Delete(ctx context.Context, prefix string) error {
	keys, err := s.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := s.os.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("storage delete %s: %w", k, err)
		}
		// The meta subject of an object, by the object store's layout
		// (ADR-20): $O.<bucket>.M.<base64url(name)>.
		subj := "$O." + s.bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(k))
		err := dropMarker(ctx, s.js, "OBJ_"+s.bucket, subj, func(data []byte) bool {
			var info struct {
				Deleted bool `json:"deleted"`
			}
			return json.Unmarshal(data, &info) == nil && info.Deleted
		})
		if err != nil {
			return fmt.Errorf("storage delete %s: %w", k, err)
		}
	}
	return nil
}

// dropMarker purges subject of stream through its last message if that is
// a delete marker (isMarker, given the message's data). Deleting from a
// bucket leaves a marker per key that nothing removes, so a bucket of
// checkpoints, and every listing of it, would grow with every checkpoint
// ever discarded. The purge stops at the marker's sequence: an object put
// again meanwhile stays. The last message is read from the stream's leader
// (leaderLast): a lagging replica, which a direct get may ask, could still
// answer with the object itself, and the marker would stay for good.
func dropMarker(ctx context.Context, js jetstream.JetStream, stream, subject string, isMarker func(data []byte) bool) error {
	m, err := leaderLast(ctx, js, stream, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("drop delete marker: %w", err)
	}
	if !isMarker(m.Data) {
		return nil
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("drop delete marker: %w", err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(m.Seq+1)); err != nil {
		return fmt.Errorf("drop delete marker: %w", err)
	}
	return nil
}

// List returns the names of live objects starting with prefix.
//
// Not the client's List, which waits for its watch's end marker for as
// long as ctx lets it: a watch whose marker never comes (seen right after
// a server restart) held a caller without a deadline — a job's failover,
// its checkpoint runner — for good. The watch here fails once no entry or
// marker came for the client's default timeout (ErrWatchStalled).
func (s *ObjectStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := CheckPrefix(prefix); err != nil {
		return nil, fmt.Errorf("storage list: %w", err)
	}
	w, err := s.os.Watch(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("storage list %s: %w", prefix, err)
	}
	defer func() { _ = w.Stop() }()
	infos, err := initial(ctx, w.Updates(), s.js.Options().DefaultTimeout)
	if err != nil {
		return nil, fmt.Errorf("storage list %s: object store %s: %w", prefix, s.bucket, err)
	}
	var keys []string
	for _, in := range infos {
		if !in.Deleted && strings.HasPrefix(in.Name, prefix) {
			keys = append(keys, in.Name)
		}
	}
	sort.Strings(keys)
	return slices.Compact(keys), nil
}

// defaultWatchIdle is the JetStream client's default timeout, for a
// client whose own is not set.
const defaultWatchIdle = 5 * time.Second

// ErrWatchStalled is wrapped by a listing whose watch brought neither an
// entry nor its end for the client's default timeout.
var ErrWatchStalled = errors.New("watch stalled")

// initial collects the initial values a bucket watch delivers, up to its
// end marker (the zero T), and fails when ctx ends, when the watch ends
// before the marker (what it delivered would be part of the list only), or
// when nothing came for idle (0: defaultWatchIdle): the client waits for
// the marker without a bound of its own.
func initial[T comparable](ctx context.Context, updates <-chan T, idle time.Duration) ([]T, error) {
	if idle <= 0 {
		idle = defaultWatchIdle
	}
	t := time.NewTimer(idle)
	defer t.Stop()
	var zero T
	var out []T
	for {
		select {
		case v, ok := <-updates:
			if !ok {
				return nil, errors.New("the watch ended before its initial values did")
			}
			if v == zero {
				return out, nil
			}
			out = append(out, v)
			t.Reset(idle)
		case <-t.C:
			return nil, fmt.Errorf("%w: nothing for %s after %d entries", ErrWatchStalled, idle, len(out))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
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

// Put stores the value; one KV put is atomic.
func (s *KV) Put(ctx context.Context, key string, r io.Reader) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	if _, err := s.kv.Put(ctx, key, data); err != nil {
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
// The key's last revision is read from the stream's leader, not with a
// direct get (which KV buckets allow, and which in a cluster any replica
// answers, a lagging one with an older revision or none): a key put just
// before would be left, or left at its latest revision.
func (s *KV) Delete(ctx context.Context, prefix string) error {
	keys, err := s.List(ctx, prefix)
	if err != nil {
		return err
	}
	st, err := s.js.Stream(ctx, "KV_"+s.bucket)
	if err != nil {
		return fmt.Errorf("storage delete %s: %w", prefix, err)
	}
	for _, k := range keys {
		subj := "$KV." + s.bucket + "." + k
		seq, err := lastSeq(ctx, s.js, "KV_"+s.bucket, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted meanwhile
		}
		if err == nil {
			err = st.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(seq+1))
		}
		if err != nil {
			return fmt.Errorf("storage delete %s: %w", k, err)
		}
	}
	return nil
}

// leaderMsg is a message as STREAM.MSG.GET returns it.
type leaderMsg struct {
	Seq    uint64 `json:"seq"`
	Header []byte `json:"hdrs"`
	Data   []byte `json:"data"`
}

// deleted reports whether m is a KV delete or purge marker, or a marker
// the server left for a removal (as the KV client tells them).
func (m *leaderMsg) deleted() bool {
	if len(m.Header) == 0 {
		return false
	}
	h, err := nats.DecodeHeadersMsg(m.Header)
	if err != nil {
		return false
	}
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return true
	}
	return h.Get(jetstream.MarkerReasonHeader) != ""
}

// lastSeq returns the sequence of the last message on subject in stream,
// as the stream's leader has it (leaderLast).
func lastSeq(ctx context.Context, js jetstream.JetStream, stream, subject string) (uint64, error) {
	m, err := leaderLast(ctx, js, stream, subject)
	if err != nil {
		return 0, err
	}
	return m.Seq, nil
}

// leaderLast returns the last message on subject in stream, as the
// stream's leader has it: the JetStream API's message get
// (STREAM.MSG.GET), which only the leader answers. jetstream.Stream's
// GetLastMsgForSubject, and a KV bucket's Get, use a direct get instead
// whenever the stream allows them, which any replica answers. No message
// on subject gives jetstream.ErrMsgNotFound.
//
// A stream whose leader is gone has none for a while: its other replicas
// notice only when the leader's heartbeats stop, and elect another
// (seconds). Meanwhile nobody answers the request, or a replica answers
// that the cluster is not available — where a direct get would have read
// the value. So the request is sent again (leaderResend after the last
// try without an answer, leaderRetry after an answer that there is no
// leader), and an answer to any try counts, until ctx is done; without a
// deadline, leaderWait bounds the wait.
func leaderLast(ctx context.Context, js jetstream.JetStream, stream, subject string) (*leaderMsg, error) {
	o := js.Options()
	prefix := jetstream.DefaultAPIPrefix
	switch {
	case o.Domain != "":
		prefix = "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		prefix = strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(leaderWait, o.DefaultTimeout))
		defer cancel()
	}
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return nil, err
	}
	nc := js.Conn()
	api := prefix + "STREAM.MSG.GET." + stream
	inbox := nc.NewInbox()
	answers := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return nil, fmt.Errorf("last message on %s: %w", subject, err)
	}
	defer sub.Unsubscribe()
	var leaderless error // the last answer that the stream has no leader
	resend := time.NewTimer(0)
	defer resend.Stop()
	for {
		select {
		case <-ctx.Done():
			if leaderless != nil {
				return nil, fmt.Errorf("last message on %s: %w (%w)", subject, leaderless, ctx.Err())
			}
			return nil, fmt.Errorf("last message on %s: no answer from stream %s's leader: %w", subject, stream, ctx.Err())
		case <-resend.C:
			if err := nc.PublishRequest(api, inbox, req); err != nil {
				return nil, fmt.Errorf("last message on %s: %w", subject, err)
			}
			resend.Reset(leaderResend)
		case msg := <-answers:
			if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
				return nil, fmt.Errorf("last message on %s: %w", subject, nats.ErrNoResponders)
			}
			var resp struct {
				Error   *jetstream.APIError `json:"error"`
				Message *leaderMsg          `json:"message"`
			}
			if err := json.Unmarshal(msg.Data, &resp); err != nil {
				return nil, fmt.Errorf("last message on %s: %w", subject, err)
			}
			switch {
			case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
				return nil, jetstream.ErrMsgNotFound
			case resp.Error != nil && resp.Error.ErrorCode == jsErrCodeClusterNotAvail:
				leaderless = resp.Error
				resend.Reset(leaderRetry)
			case resp.Error != nil:
				return nil, fmt.Errorf("last message on %s: %w", subject, resp.Error)
			case resp.Message == nil:
				return nil, fmt.Errorf("last message on %s: %w", subject, jetstream.ErrInvalidJetStreamResponse)
			default:
				return resp.Message, nil
			}
		}
	}
}

// How leaderLast asks a stream's leader while it may have none.
const (
	// leaderResend is how long a try waits for an answer before the
	// request is sent again: a leader that is gone answers none.
	leaderResend = 2 * time.Second
	// leaderRetry is the pause after an answer that the stream has no
	// leader, while its replicas elect one.
	leaderRetry = 250 * time.Millisecond
	// leaderWait bounds the whole wait of a caller without a deadline:
	// well past a raft election after a leader's loss (its replicas
	// notice in 4 to 9 s).
	leaderWait = 30 * time.Second
	// jsErrCodeClusterNotAvail is the server's "JetStream system
	// temporarily unavailable" (JSClusterNotAvailErr): a stream, or
	// JetStream's meta layer, without a leader.
	jsErrCodeClusterNotAvail jetstream.ErrorCode = 10008
)

// List returns the live keys starting with prefix, sorted.
func (s *KV) List(ctx context.Context, prefix string) ([]string, error) {
	if err := CheckPrefix(prefix); err != nil {
		return nil, fmt.Errorf("storage list: %w", err)
	}
	// Not the client's Keys, which ignores ctx once it watches and waits
	// for the watch's end marker for good (see ObjectStore.List).
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes(), jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("storage list %s: %w", prefix, err)
	}
	defer func() { _ = w.Stop() }()
	all, err := initial(ctx, w.Updates(), s.js.Options().DefaultTimeout)
	if err != nil {
		return nil, fmt.Errorf("storage list %s: kv %s: %w", prefix, s.bucket, err)
	}
	var keys []string
	for _, e := range all {
		if k := e.Key(); strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return slices.Compact(keys), nil
}
