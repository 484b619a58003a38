package storage

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/natsconn"
)

// The reads here go to a stream's leader: the JetStream API's message get
// (STREAM.MSG.GET) and stream info (STREAM.INFO), which in a cluster only
// the stream's leader answers. The client's own reads of a bucket do not:
// a KV Get and an object's info use a direct get whenever the bucket
// allows them (both kinds do), and a watch, a KV listing or an object's
// chunks go through a consumer; any replica answers a direct get, and a
// consumer may be placed on any replica, a lagging one among them, which
// answers with what it has applied so far: an older revision, or nothing
// for what was just written.
//
// Every listing here is the leader's: each caller would do harm with a
// stale one (a checkpoint restored older than the newest, a completed
// checkpoint's marker taken for stray, a job left unresumed, a module
// just pushed not found), and the leader's costs less than a watch
// anyway: one request for the subjects' names, one for each key listed.
// (While a stream has no leader, a replica may answer STREAM.INFO, as the
// server lets it; a read then fails or is as current as that replica.)

// apiSubject returns the JetStream API subject for api ("STREAM.INFO.S")
// as js's domain or API prefix has it.
func apiSubject(js jetstream.JetStream, api string) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API." + api
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "." + api
	}
	return jetstream.DefaultAPIPrefix + api
}

// apiRequest sends req to the API subject for api and decodes the answer
// into resp, as leaderRequest asks (an answer that there is no leader is
// resp's to hold).
func apiRequest(ctx context.Context, js jetstream.JetStream, api string, req, resp any) error {
	return leaderRequest(ctx, js, api, req, func(data []byte) error { return json.Unmarshal(data, resp) })
}

// leaderRequest sends req to the API subject for api, which the stream's
// leader answers, and returns what decode makes of the answer.
//
// A stream whose leader is gone has none for a while: its other replicas
// notice only when the leader's heartbeats stop, and elect another
// (seconds). Meanwhile nobody answers the request, or a replica answers
// that the cluster is not available (decode returns an error wrapping
// errLeaderless) — where a direct get would have been answered. So the
// request is sent again (leaderResend after the last try without an
// answer, leaderRetry after an answer that there is no leader), and an
// answer to any try counts, until ctx is done; without a deadline,
// leaderWait bounds the wait. Every request here may be sent twice: a
// read, and a purge through a given sequence, do the same again.
func leaderRequest(ctx context.Context, js jetstream.JetStream, api string, req any, decode func(data []byte) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(leaderWait, js.Options().DefaultTimeout))
		defer cancel()
	}
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	nc := js.Conn()
	subj := apiSubject(js, api)
	inbox := nc.NewInbox()
	answers := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	var leaderless error // the last answer that the stream has no leader
	resend := time.NewTimer(0)
	defer resend.Stop()
	for {
		select {
		case <-ctx.Done():
			if leaderless != nil {
				// The answer names no stream: the request's subject does.
				return fmt.Errorf("%w (asking %s: %w)", leaderless, subj, ctx.Err())
			}
			return fmt.Errorf("no answer to %s from the stream's leader: %w", subj, ctx.Err())
		case <-resend.C:
			if err := nc.PublishRequest(subj, inbox, data); err != nil {
				return err
			}
			resend.Reset(leaderResend)
		case msg := <-answers:
			if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
				return nats.ErrNoResponders
			}
			err := decode(msg.Data)
			if !errors.Is(err, errLeaderless) {
				return err
			}
			leaderless = err
			resend.Reset(leaderRetry)
		}
	}
}

// errLeaderless is wrapped by an answer that the stream has no leader.
var errLeaderless = errors.New("the stream has no leader")

// apiError returns e, wrapping errLeaderless too when e says the stream
// (or JetStream's meta layer) has no leader.
func apiError(e *jetstream.APIError) error {
	if natsconn.Leaderless(e) {
		return fmt.Errorf("%w: %w", errLeaderless, e)
	}
	return e
}

// How leaderRequest asks a stream's leader while it may have none.
const (
	// leaderResend is how long a try waits for an answer before the
	// request is sent again: a leader that is gone answers none.
	leaderResend = 2 * time.Second
	// leaderRetry is the pause after an answer that the stream has no
	// leader, while its replicas elect one.
	leaderRetry = natsconn.ElectionRetry
	// leaderWait bounds the whole wait of a caller without a deadline,
	// as it does natsconn.ThroughElection's.
	leaderWait = natsconn.ElectionWait
)

// leaderMsg is a message as STREAM.MSG.GET returns it.
type leaderMsg struct {
	Seq    uint64    `json:"seq"`
	Header []byte    `json:"hdrs"`
	Data   []byte    `json:"data"`
	Time   time.Time `json:"time"`
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

// msgGetRequest is a STREAM.MSG.GET request: the last message on LastFor,
// or the first message at or after Seq on NextFor.
type msgGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
}

// leaderGet asks stream's leader for the message req names. None gives
// jetstream.ErrMsgNotFound.
func leaderGet(ctx context.Context, js jetstream.JetStream, stream string, req msgGetRequest) (*leaderMsg, error) {
	var m *leaderMsg
	err := leaderRequest(ctx, js, "STREAM.MSG.GET."+stream, req, func(raw []byte) error {
		var resp struct {
			Error   *jetstream.APIError `json:"error"`
			Message *leaderMsg          `json:"message"`
		}
		raw, data, err := cutData(raw)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &resp); err != nil {
			return err
		}
		if resp.Message != nil && data != nil {
			resp.Message.Data = data
		}
		switch {
		case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
			return jetstream.ErrMsgNotFound
		case resp.Error != nil:
			return apiError(resp.Error)
		case resp.Message == nil:
			return jetstream.ErrInvalidJetStreamResponse
		}
		m = resp.Message
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// dataKey starts the data of a STREAM.MSG.GET answer's message.
var dataKey = []byte(`"data":"`)

// cutData returns a STREAM.MSG.GET answer without its message's data, and
// the data, decoded; nil data when the answer has none. The data is most
// of an object chunk's answer (128 KiB, in base64), and decoding it as a
// JSON string (validated, unquoted rune by rune) took three quarters of
// the time an object's read took. The server writes it as a plain base64
// string (encoding/json, which escapes none of its characters), and no
// other part of the answer can hold the key's quotes unescaped.
func cutData(raw []byte) (rest, data []byte, err error) {
	i := bytes.Index(raw, dataKey)
	if i < 0 {
		return raw, nil, nil
	}
	start := i + len(dataKey)
	n := bytes.IndexByte(raw[start:], '"')
	if n < 0 {
		return nil, nil, errors.New("message get: the data string does not end")
	}
	data = make([]byte, base64.StdEncoding.DecodedLen(n))
	m, err := base64.StdEncoding.Decode(data, raw[start:start+n])
	if err != nil {
		return nil, nil, fmt.Errorf("message get: data: %w", err)
	}
	rest = append(append(make([]byte, 0, len(raw)-n), raw[:start]...), raw[start+n:]...)
	return rest, data[:m], nil
}

// leaderLast returns the last message on subject in stream, as the
// stream's leader has it. No message on subject gives
// jetstream.ErrMsgNotFound.
func leaderLast(ctx context.Context, js jetstream.JetStream, stream, subject string) (*leaderMsg, error) {
	m, err := leaderGet(ctx, js, stream, msgGetRequest{LastFor: subject})
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("last message on %s: %w", subject, err)
	}
	return m, err
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

// leaderSubjects returns the subjects of stream that match filter and
// hold messages, with how many each holds, as the stream's leader has
// them: STREAM.INFO with a subjects filter. The server sends at most
// 100,000 subjects an answer (its JSMaxSubjectDetails); past that it sorts them
// and sends the page at the offset asked for, of the subjects as they
// are then. Each page after the first is asked for from the last subject
// of the one before, and must start at or before it: a subject that went
// away meanwhile, sorted before the offset, moves every later one a place
// down, and a page that starts past that last subject may have skipped
// one that was there all along (Catalog.IDs missing the newest
// checkpoint). Such a page is asked for again from further back. So every
// subject that holds messages through the whole listing is listed; one
// that comes or goes meanwhile may be or not.
func leaderSubjects(ctx context.Context, js jetstream.JetStream, stream, filter string) (map[string]uint64, error) {
	out := map[string]uint64{}
	offset, back := 0, 0
	last := "" // the greatest subject of the page before
	for {
		page, total, err := subjectsPage(ctx, js, stream, filter, offset)
		if err != nil {
			return nil, fmt.Errorf("subjects of stream %s: %w", stream, err)
		}
		first, greatest := "", ""
		for s, c := range page {
			out[s] = c
			if first == "" || s < first {
				first = s
			}
			greatest = max(greatest, s)
		}
		if offset > 0 && (len(page) == 0 || first > last) {
			// Subjects before the offset went away since the page
			// before: step back, further each time.
			back = max(2*back, 1024)
			offset = max(offset-back, 0)
			continue
		}
		if offset+len(page) >= total {
			return out, nil
		}
		// The next page overlaps this one by its last subject.
		offset, last, back = offset+len(page)-1, greatest, 0
	}
}

// subjectsPage asks stream's leader for the subjects matching filter
// from offset on (leaderSubjects), and returns them with how many there
// are in all.
func subjectsPage(ctx context.Context, js jetstream.JetStream, stream, filter string, offset int) (page map[string]uint64, total int, err error) {
	req := struct {
		Filter string `json:"subjects_filter"`
		Offset int    `json:"offset,omitempty"`
	}{filter, offset}
	err = leaderRequest(ctx, js, "STREAM.INFO."+stream, req, func(data []byte) error {
		var resp struct {
			Error   *jetstream.APIError `json:"error"`
			Total   int                 `json:"total"`
			Cluster *struct {
				Leader string `json:"leader"`
			} `json:"cluster"`
			State *struct {
				Subjects map[string]uint64 `json:"subjects"`
			} `json:"state"`
		}
		if err := json.Unmarshal(data, &resp); err != nil {
			return err
		}
		switch {
		case resp.Error != nil:
			return apiError(resp.Error)
		case resp.State == nil:
			return jetstream.ErrInvalidJetStreamResponse
		case resp.Cluster != nil && resp.Cluster.Leader == "":
			// A replica answers for a stream without a leader, with
			// what it has applied so far.
			return errLeaderless
		}
		page, total = resp.State.Subjects, resp.Total
		return nil
	})
	return page, total, err
}

// purge removes the messages on subject in stream: those before sequence
// before if that is above 0, else all of them.
func purge(ctx context.Context, js jetstream.JetStream, stream, subject string, before uint64) error {
	req := struct {
		Seq    uint64 `json:"seq,omitempty"`
		Filter string `json:"filter"`
	}{before, subject}
	err := leaderRequest(ctx, js, "STREAM.PURGE."+stream, req, func(data []byte) error {
		return successReply(data, 0)
	})
	if err != nil {
		return fmt.Errorf("purge %s: %w", subject, err)
	}
	return nil
}

// deleteMsg removes the message at seq from stream, through the stream's
// leader. A message already gone is no error: a request sent again
// (leaderRequest) finds the one before it done.
func deleteMsg(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) error {
	req := struct {
		Seq     uint64 `json:"seq"`
		NoErase bool   `json:"no_erase"`
	}{seq, true}
	err := leaderRequest(ctx, js, "STREAM.MSG.DELETE."+stream, req, func(data []byte) error {
		return successReply(data, jetstream.JSErrCodeMessageNotFound)
	})
	if err != nil {
		return fmt.Errorf("delete message %d of %s: %w", seq, stream, err)
	}
	return nil
}

// successReply decodes a JetStream API answer that says only whether the
// request succeeded; an error with code done (if not 0) means that what
// was asked is done already, which is no error.
func successReply(data []byte, done jetstream.ErrorCode) error {
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Success bool                `json:"success"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return err
	}
	switch {
	case resp.Error != nil && done != 0 && resp.Error.ErrorCode == done:
		return nil
	case resp.Error != nil:
		return apiError(resp.Error)
	case !resp.Success:
		return jetstream.ErrInvalidJetStreamResponse
	}
	return nil
}
