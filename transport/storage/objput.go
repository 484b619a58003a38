package storage

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/weirhq/weir/transport/natsconn"
)

// How ObjectStore.Put publishes an object.
const (
	// chunkSize is the size of each chunk but the last, the object store
	// client's default.
	chunkSize = 128 << 10
	// putWindow is the most chunks a put has published and not yet seen
	// stored in order: their bytes are kept for a resend (4 MiB).
	putWindow = 32
	// putDedupSpan bounds how long one chunk is published again under the
	// same message ID: well within the stream's duplicate window (the
	// server's default, 2 min, for the buckets weir creates), past which
	// a try of a chunk stored before would be stored a second time.
	putDedupSpan = 90 * time.Second
)

// putHooks lets a test drop a chunk's try before it is published, or its
// acknowledgement when it comes (index counts the put's chunks from 0,
// gen is the chunk's message ID's generation, try counts its tries under
// that from 1). Nil hooks, as outside tests, drop nothing.
type putHooks struct {
	dropPublish func(index uint32, gen, try int) bool
	dropAck     func(index uint32, gen, try int) bool
}

// Put uploads the object in chunks; it becomes visible when complete,
// with its meta message. The object is published in the object store's
// layout (ADR-20), as the client's Put does, so that any object store
// client reads it: chunks on $O.<bucket>.C.<nuid>, then the info on
// $O.<bucket>.M.<base64url(name)>, rolling up the object's earlier infos.
//
// Unlike the client's, the put waits out an election of the stream's
// leader (its leader's server killed or frozen): a chunk that nobody
// stores (no responders), whose acknowledgement does not come within the
// client's timeout, or that the cluster says it cannot take now, is
// published again, within ctx's deadline or, without one, leaderWait
// from its first try (and never past putDedupSpan). Each chunk carries a
// message ID (the put's NUID and the chunk's index), so that a chunk that
// was stored though its acknowledgement was lost is not stored again.
// Chunks are published putWindow at a time, as the client publishes
// them asynchronously; each is kept until it is known stored after the
// chunks before it, since the chunks' order in the stream is the
// object's. A chunk stored before one ahead of it (which failed first,
// and was stored again after) is deleted and published again, under a
// new message ID, until every chunk is stored in order. While a chunk
// is being published again, no new chunk is read.
//
// A failure while the put's own connection is down is returned at once,
// as KV.Put's: that is no election.
//
// The info of an object the put replaces is read from the stream's
// leader (the client read it with a direct get, which a lagging replica
// may answer with nothing: the replaced object's chunks stayed for good),
// and its chunks are purged once the new info is stored.
//
// A put that fails — its reader failing, ctx done — leaves nothing: its
// chunks are purged once the tries in flight are answered (or given up),
// with a context of their own, since a canceled ctx would leave them in
// the bucket for good (no object names them, so no Delete finds them).
func (s *ObjectStore) Put(ctx context.Context, key string, r io.Reader) error {
	return s.PutObject(ctx, jetstream.ObjectMeta{Name: key}, r)
}

// PutObject is Put of the object meta.Name, whose info also carries
// meta's description, headers and metadata (an object store client reads
// them in the object's info); meta.Opts is ignored: the chunks are the
// put's own size.
func (s *ObjectStore) PutObject(ctx context.Context, meta jetstream.ObjectMeta, r io.Reader) error {
	key := meta.Name
	if err := CheckKey(key); err != nil {
		return err
	}
	p, err := s.newPut(meta)
	if err != nil {
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	defer p.close()
	replaced, err := p.run(ctx, r)
	if err != nil {
		if cerr := p.abandon(ctx); cerr != nil {
			return fmt.Errorf("storage put %s: %w (and its chunks are left: %v)", key, err, cerr)
		}
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	if replaced != nil && !replaced.Deleted && replaced.NUID != "" && replaced.NUID != p.nuid {
		cctx, cancel := p.cleanupContext(ctx)
		defer cancel()
		if err := purge(cctx, s.js, "OBJ_"+s.bucket, "$O."+s.bucket+".C."+replaced.NUID, 0); err != nil {
			return fmt.Errorf("storage put %s: stored, but the chunks of the object it replaced are left: %w", key, err)
		}
	}
	return nil
}

// putChunk is a chunk of an objectPut, published and not yet known
// stored in order.
type putChunk struct {
	index uint32
	data  []byte
	// gen is the generation of the chunk's message ID: one more for each
	// copy of it that was stored out of order and deleted.
	gen   int
	tries int       // tries under gen
	first time.Time // the first try under gen
	due   time.Time // when the try in flight is given up; zero if none is
	retry time.Time // when a failed try may be sent again
	seq   uint64    // where the stream stored it; 0 until that is known
}

// msgID returns the chunk's message ID: the put's NUID, the chunk's
// index and, past the first, its generation.
func (c *putChunk) msgID(nuid string) string {
	id := nuid + "." + strconv.FormatUint(uint64(c.index), 10)
	if c.gen > 0 {
		id += "." + strconv.Itoa(c.gen)
	}
	return id
}

// objectPut is one ObjectStore.Put under way.
type objectPut struct {
	s       *ObjectStore
	nc      *nats.Conn
	key     string
	meta    jetstream.ObjectMeta // the info's: key, and what the caller gave
	nuid    string
	subj    string // the chunks' subject
	inbox   string // the acknowledgements' subjects start with it
	sub     *nats.Subscription
	acks    chan *nats.Msg
	timer   *time.Timer
	timeout time.Duration // one try's bound: the client's default timeout
	// window holds the chunks published and not yet confirmed (stored
	// after every chunk before them), by index.
	window []*putChunk
	free   [][]byte // buffers of confirmed chunks, for the next ones
	// recovering is set while a chunk is published again: no new chunk
	// is read, and one try is in flight at a time, until the window is
	// confirmed.
	recovering bool
	last       uint64 // the stream sequence of the last chunk confirmed
	// retryFor bounds how long one chunk is tried under one message ID:
	// putDedupSpan when ctx has a deadline (that bounds the rest),
	// leaderWait when it has none.
	retryFor time.Duration
	chunks   uint32
	size     uint64
	digest   hash.Hash
}

// newPut subscribes to the acknowledgements of a put of meta.Name.
func (s *ObjectStore) newPut(meta jetstream.ObjectMeta) (*objectPut, error) {
	id := nuid.Next()
	meta.Opts = &jetstream.ObjectMetaOptions{ChunkSize: chunkSize}
	p := &objectPut{
		s: s, nc: s.js.Conn(), key: meta.Name, meta: meta, nuid: id,
		subj:    "$O." + s.bucket + ".C." + id,
		acks:    make(chan *nats.Msg, 8*putWindow),
		timer:   time.NewTimer(time.Hour),
		timeout: s.js.Options().DefaultTimeout,
		digest:  sha256.New(),
	}
	p.timer.Stop()
	p.inbox = p.nc.NewInbox()
	sub, err := p.nc.ChanSubscribe(p.inbox+".>", p.acks)
	if err != nil {
		return nil, fmt.Errorf("subscribe to acknowledgements: %w", err)
	}
	p.sub = sub
	return p, nil
}

func (p *objectPut) close() {
	_ = p.sub.Unsubscribe()
	p.timer.Stop()
}

// run publishes the chunks r gives, and then the object's info, and
// returns the info of the object it replaced (nil if none).
func (p *objectPut) run(ctx context.Context, r io.Reader) (*jetstream.ObjectInfo, error) {
	p.retryFor = leaderWait
	if _, ok := ctx.Deadline(); ok {
		p.retryFor = putDedupSpan
	}
	r = ctxReader{ctx, r}
	for eof := false; !eof; {
		for len(p.window) >= putWindow || p.recovering {
			if err := p.wait(ctx); err != nil {
				return nil, err
			}
		}
		buf := p.buffer()
		n, err := io.ReadFull(r, buf)
		eof = errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !eof {
			return nil, err
		}
		if n == 0 {
			p.free = append(p.free, buf)
			continue
		}
		if err := p.add(buf[:n]); err != nil {
			return nil, err
		}
		if err := p.poll(ctx); err != nil {
			return nil, err
		}
	}
	for len(p.window) > 0 {
		if err := p.wait(ctx); err != nil {
			return nil, err
		}
	}
	return p.commit(ctx)
}

// commit publishes the object's info, once every chunk is stored, and
// returns the info it replaced, read from the leader.
func (p *objectPut) commit(ctx context.Context) (*jetstream.ObjectInfo, error) {
	replaced, _, err := p.s.leaderInfo(ctx, p.key)
	if err != nil {
		return nil, fmt.Errorf("info of the object replaced: %w", err)
	}
	info := jetstream.ObjectInfo{
		ObjectMeta: p.meta,
		Bucket:     p.s.bucket,
		NUID:       p.nuid,
		Size:       p.size,
		Chunks:     p.chunks,
		Digest:     jetstream.GetObjectDigestValue(p.digest),
	}
	data, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	err = natsconn.ThroughElection(ctx, p.nc, p.timeout, func(ctx context.Context) error {
		m := &nats.Msg{Subject: p.s.metaSubject(p.key), Data: data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		_, err := p.s.js.PublishMsg(ctx, m, jetstream.WithMsgID(p.nuid+".meta"))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("info: %w", err)
	}
	return replaced, nil
}

// buffer returns a buffer for the next chunk.
func (p *objectPut) buffer() []byte {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b[:cap(b)]
	}
	return make([]byte, chunkSize)
}

// add publishes data as the next chunk.
func (p *objectPut) add(data []byte) error {
	c := &putChunk{index: p.chunks, data: data}
	p.chunks++
	p.size += uint64(len(data))
	p.digest.Write(data)
	p.window = append(p.window, c)
	return p.send(c)
}

// send publishes a try of c, acknowledged on inbox.index.gen.try.
func (p *objectPut) send(c *putChunk) error {
	now := time.Now()
	c.tries++
	if c.tries == 1 {
		c.first = now
	}
	c.due, c.retry = now.Add(p.timeout), time.Time{}
	if h := p.s.hooks; h != nil && h.dropPublish != nil && h.dropPublish(c.index, c.gen, c.tries) {
		return nil
	}
	m := &nats.Msg{
		Subject: p.subj,
		Reply:   fmt.Sprintf("%s.%d.%d.%d", p.inbox, c.index, c.gen, c.tries),
		Header:  nats.Header{},
		Data:    c.data,
	}
	m.Header.Set(jetstream.MsgIDHeader, c.msgID(p.nuid))
	if err := p.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("chunk %d: %w", c.index+1, err)
	}
	return nil
}

// poll takes the acknowledgements that came, gives up the tries they
// did not come for in time, and sends what is due.
func (p *objectPut) poll(ctx context.Context) error {
	for {
		select {
		case m := <-p.acks:
			if err := p.ack(m); err != nil {
				return err
			}
			continue
		default:
		}
		return p.step(ctx)
	}
}

// wait waits for an acknowledgement, or for the next try to be given up
// or sent, and then polls.
func (p *objectPut) wait(ctx context.Context) error {
	if next := p.next(); !next.IsZero() {
		p.timer.Reset(time.Until(next))
		defer p.timer.Stop()
	}
	select {
	case m := <-p.acks:
		if err := p.ack(m); err != nil {
			return err
		}
	case <-p.timer.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.poll(ctx)
}

// next returns when a try in flight is to be given up or a failed chunk
// sent again, whichever comes first; zero if neither is to come.
func (p *objectPut) next() time.Time {
	var next time.Time
	for _, c := range p.window {
		if !c.due.IsZero() && (next.IsZero() || c.due.Before(next)) {
			next = c.due
		}
	}
	if c := p.resend(); c != nil {
		if next.IsZero() || c.retry.Before(next) {
			next = c.retry
		}
	}
	return next
}

// resend returns the chunk to publish again while recovering: the first
// one not stored, once no try is in flight; nil if there is none.
func (p *objectPut) resend() *putChunk {
	if !p.recovering {
		return nil
	}
	for _, c := range p.window {
		if !c.due.IsZero() {
			return nil
		}
	}
	for _, c := range p.window {
		if c.seq == 0 {
			return c
		}
	}
	return nil
}

// ack takes the acknowledgement m of a try.
func (p *objectPut) ack(m *nats.Msg) error {
	c, gen, try, ok := p.acked(m.Subject)
	if !ok || gen != c.gen || c.seq != 0 {
		return nil // a chunk confirmed already, or a copy deleted
	}
	if h := p.s.hooks; h != nil && h.dropAck != nil && h.dropAck(c.index, gen, try) {
		return nil
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return p.fail(c, fmt.Errorf("chunk %d: %w", c.index+1, nats.ErrNoResponders))
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		Seq   uint64              `json:"seq"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("chunk %d: acknowledgement: %w", c.index+1, err)
	}
	switch {
	case resp.Error != nil:
		return p.fail(c, fmt.Errorf("chunk %d: %w", c.index+1, resp.Error))
	case resp.Seq == 0:
		return fmt.Errorf("chunk %d: %w", c.index+1, jetstream.ErrInvalidJetStreamResponse)
	}
	c.seq, c.due = resp.Seq, time.Time{}
	return nil
}

// acked returns the chunk in the window, and the generation and try, an
// acknowledgement's subject names.
func (p *objectPut) acked(subject string) (c *putChunk, gen, try int, ok bool) {
	f := strings.Split(strings.TrimPrefix(subject, p.inbox+"."), ".")
	if len(f) != 3 || len(p.window) == 0 {
		return nil, 0, 0, false
	}
	index, err1 := strconv.ParseUint(f[0], 10, 32)
	gen, err2 := strconv.Atoi(f[1])
	try, err3 := strconv.Atoi(f[2])
	first := uint64(p.window[0].index)
	if err1 != nil || err2 != nil || err3 != nil || index < first || index-first >= uint64(len(p.window)) {
		return nil, 0, 0, false
	}
	return p.window[index-first], gen, try, true
}

// fail takes a try of c that failed with err: c is sent again once the
// other tries in flight are answered, if err is the stream's want of a
// leader, its connection is up, and c has been tried for less than the
// put may wait; otherwise the put fails with err.
func (p *objectPut) fail(c *putChunk, err error) error {
	if !natsconn.Leaderless(err) || !p.nc.IsConnected() {
		return err
	}
	if time.Since(c.first) >= p.retryFor {
		return fmt.Errorf("%w (tried for %v)", err, p.retryFor)
	}
	c.due, c.retry = time.Time{}, time.Now().Add(leaderRetry)
	p.recovering = true
	return nil
}

// step gives up the tries in flight past their due, confirms the chunks
// stored in order, and sends again what is due.
func (p *objectPut) step(ctx context.Context) error {
	now := time.Now()
	for _, c := range p.window {
		if !c.due.IsZero() && !now.Before(c.due) {
			err := fmt.Errorf("chunk %d: no acknowledgement in %v: %w", c.index+1, p.timeout, nats.ErrTimeout)
			if err := p.fail(c, err); err != nil {
				return err
			}
		}
	}
	if err := p.confirm(ctx); err != nil {
		return err
	}
	if c := p.resend(); c != nil && !now.Before(c.retry) {
		return p.send(c)
	}
	return nil
}

// confirm takes from the window's front the chunks stored after every
// chunk before them, and keeps their buffers for the next chunks. A
// chunk stored before the one ahead of it (that one failed first, and
// was stored again after) is deleted from the stream, and published
// again under its next message ID.
func (p *objectPut) confirm(ctx context.Context) error {
	for len(p.window) > 0 && p.window[0].seq != 0 {
		c := p.window[0]
		if c.seq <= p.last {
			if err := deleteMsg(ctx, p.s.js, "OBJ_"+p.s.bucket, c.seq); err != nil {
				return fmt.Errorf("chunk %d: stored out of order: %w", c.index+1, err)
			}
			c.seq, c.gen, c.tries, c.retry = 0, c.gen+1, 0, time.Now()
			p.recovering = true
			return nil
		}
		p.last = c.seq
		p.free = append(p.free, c.data)
		p.window[0] = nil
		p.window = p.window[1:]
	}
	if len(p.window) == 0 {
		p.recovering = false
	}
	return nil
}

// abandon purges the chunks of a put that failed, once the tries in
// flight are answered or past their due (so that none is stored after
// the purge), with a context of its own (cleanupContext).
func (p *objectPut) abandon(ctx context.Context) error {
	if p.chunks == 0 {
		return nil
	}
	cctx, cancel := p.cleanupContext(ctx)
	defer cancel()
	for {
		var due time.Time
		for _, c := range p.window {
			if !c.due.IsZero() && c.due.After(due) {
				due = c.due
			}
		}
		if due.IsZero() {
			break
		}
		p.timer.Reset(time.Until(due))
		select {
		case m := <-p.acks:
			if c, _, _, ok := p.acked(m.Subject); ok {
				c.due = time.Time{}
			}
			continue
		case <-p.timer.C:
		case <-cctx.Done():
		}
		break
	}
	p.timer.Stop()
	return purge(cctx, p.s.js, "OBJ_"+p.s.bucket, p.subj, 0)
}

// cleanupContext returns the context a put cleans up with: ctx's values
// without its end (a canceled put still cleans up), bounded by
// leaderWait, or by one try's timeout while the connection is down (a
// process stopping while its servers are gone is not held up).
func (p *objectPut) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	wait := max(leaderWait, p.timeout)
	if !p.nc.IsConnected() {
		wait = p.timeout
	}
	return context.WithTimeout(context.WithoutCancel(ctx), wait)
}
