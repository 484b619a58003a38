package control

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/weirhq/weir/coordinator/jobspec"
)

// Error codes carried in Reply.Code, and the errors they map to. They are
// for errors.Is: make errors that match them with Errorf, whose message
// says what is wrong in words and leaves the sentinel's text out.
var (
	// ErrNotFound: the job, checkpoint or worker does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the request conflicts with the current state (e.g. a job
	// with that name is already running).
	ErrConflict = errors.New("conflict")
	// ErrInvalid: the request is malformed or refers to something invalid.
	ErrInvalid = errors.New("invalid request")
	// ErrUnavailable: nobody answered (no coordinator or worker listening).
	ErrUnavailable = errors.New("unavailable")
	// ErrUnrecoverable: the failure would recur on every restart (the job's
	// configuration or an external system must change first), so the job
	// fails at once instead of using up its restart strategy.
	ErrUnrecoverable = errors.New("unrecoverable")
	// ErrNoSlots: a worker refused a deploy whose tasks, with those it
	// runs already, are more than its slots (WorkerOptions.Slots): the
	// coordinator that sent it counted fewer tasks on the worker than it
	// runs (two coordinators during a handover, attempts a cut-off worker
	// still ran, a coordinator that does not count slots).
	ErrNoSlots = errors.New("no free slots")
)

// Unrecoverable returns err, unchanged in its message, marked so that
// errors.Is(err, ErrUnrecoverable) holds (and a reply carries the code).
func Unrecoverable(err error) error {
	if err == nil || errors.Is(err, ErrUnrecoverable) {
		return err
	}
	return markedError{err, ErrUnrecoverable}
}

// Errorf formats an error as fmt.Errorf does and marks it with sentinel
// (ErrNotFound, ErrConflict, ...): errors.Is(err, sentinel) holds and a
// reply carries its code, but the message is the formatted one alone —
// "job wc has not ended (it is running): …", not "job wc is running:
// conflict".
func Errorf(sentinel error, format string, args ...any) error {
	return markedError{fmt.Errorf(format, args...), sentinel}
}

// markedError is an error that also matches a sentinel its message leaves
// out.
type markedError struct {
	error
	sentinel error
}

func (e markedError) Unwrap() []error { return []error{e.error, e.sentinel} }

// codes in the order codeOf tries them: an error that wraps several
// sentinels gets the first.
var codes = []struct {
	code string
	err  error
}{
	{"unrecoverable", ErrUnrecoverable},
	{"not_found", ErrNotFound},
	{"conflict", ErrConflict},
	{"invalid", ErrInvalid},
	{"unavailable", ErrUnavailable},
	{"no_slots", ErrNoSlots},
}

// WithFailureKind returns err, unchanged in its message, classified as a
// job's failure of kind: FailureKindOf(err) returns kind, and a reply
// with err carries it to the requester (Reply.FailureKind), whose
// *RemoteError has it too. A worker so says how a deploy failed when an
// operator failed setting up (a weir_init past its memory limit is
// FailureMemoryLimit). FailureUnknown leaves err as it is.
func WithFailureKind(err error, kind FailureKind) error {
	if err == nil || kind == FailureUnknown {
		return err
	}
	return kindedError{err, kind}
}

// WithFailedTask returns err, unchanged in its message, as a failure of
// task (a task ID): FailedTaskOf(err) returns task, and a reply with err
// carries it to the requester (Reply.FailureTask), whose *RemoteError has
// it too. A worker so names the task whose operator failed setting up a
// deploy. "" leaves err as it is.
func WithFailedTask(err error, task string) error {
	if err == nil || task == "" {
		return err
	}
	return taskError{err, task}
}

// FailedTaskOf returns the task err was said to be a failure of
// (WithFailedTask, here or by the peer that replied with it), or "".
func FailedTaskOf(err error) string {
	var te taskError
	if errors.As(err, &te) {
		return te.task
	}
	var re *RemoteError
	if errors.As(err, &re) {
		return re.FailureTask
	}
	return ""
}

// taskError is an error that is a failure of a task.
type taskError struct {
	error
	task string
}

func (e taskError) Unwrap() error { return e.error }

// FailureKindOf returns the failure kind err was classified with
// (WithFailureKind, here or by the peer that replied with it), or
// FailureUnknown.
func FailureKindOf(err error) FailureKind {
	var ke kindedError
	if errors.As(err, &ke) {
		return ke.kind
	}
	var re *RemoteError
	if errors.As(err, &re) {
		return re.FailureKind
	}
	return FailureUnknown
}

// kindedError is an error classified as a job's failure of a kind.
type kindedError struct {
	error
	kind FailureKind
}

func (e kindedError) Unwrap() error { return e.error }

// RemoteError is an error a peer replied with.
type RemoteError struct {
	Subject string
	Msg     string
	Code    string
	// FailureKind is the reply's (Reply.FailureKind): FailureUnknown from
	// a peer that does not send it.
	FailureKind FailureKind
	// FailureTask is the reply's (Reply.FailureTask): "" from a peer
	// that does not send it.
	FailureTask string
}

func (e *RemoteError) Error() string { return e.Msg }

// Unwrap returns the sentinel error matching Code, if any.
func (e *RemoteError) Unwrap() error {
	for _, c := range codes {
		if c.code == e.Code {
			return c.err
		}
	}
	return nil
}

func codeOf(err error) string {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return ""
}

func replyFor(err error) Reply {
	if err == nil {
		return Reply{}
	}
	return Reply{Error: err.Error(), Code: codeOf(err), FailureKind: FailureKindOf(err), FailureTask: FailedTaskOf(err)}
}

// request sends v to subject and decodes the reply into out (which embeds
// or is a Reply-bearing struct). Without a ctx deadline, DefaultRequestTimeout
// applies.
func request(ctx context.Context, nc *nats.Conn, subject string, v any, out any) error {
	return requestWith(ctx, nc, subject, v, out, false)
}

// requestWith is request; with waitHeader, the request carries how long
// its caller waits for the answer (HeaderWait), so that the handler gives
// up before the caller does (ServeAPI).
func requestWith(ctx context.Context, nc *nats.Conn, subject string, v any, out any, waitHeader bool) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", subject, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultRequestTimeout)
		defer cancel()
	}
	req := nats.NewMsg(subject)
	req.Data = data
	if waitHeader {
		deadline, _ := ctx.Deadline()
		req.Header.Set(HeaderWait, time.Until(deadline).String())
	}
	// An inbox of its own rather than nc.Request, which takes the first
	// message only: a large answer comes in parts (respond).
	ans, err := subscribeAnswers(nc)
	if err != nil {
		return fmt.Errorf("%s: subscribe to the answer: %w", subject, err)
	}
	defer ans.close()
	req.Reply = ans.inbox
	err = nc.PublishMsg(req)
	var msg *nats.Msg
	if err == nil {
		msg, err = ans.next(ctx)
	}
	if err == nil && len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
		err = nats.ErrNoResponders
	}
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			// It also matches nats.ErrNoResponders: nobody received the
			// request, so that sending it again is safe (call).
			return markedError{Errorf(ErrUnavailable, "%s: nobody is listening (no responders)", subject), nats.ErrNoResponders}
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			// It would be as large again: what makes it so, and what
			// to do (payloadAdvice).
			return Unrecoverable(fmt.Errorf("%s: the request of %d bytes is larger than the NATS server accepts (max_payload %d): %s: %w",
				subject, len(data), nc.MaxPayload(), payloadAdvice(v, len(data)), err))
		}
		return fmt.Errorf("%s: %w", subject, err)
	}
	return decodeReply(subject, msg.Data, out)
}

// payloadAdvice says what makes req, a request of size bytes encoded,
// too large for the server's max_payload, and what to do. An operator's
// config that makes half of it or more is named, with its size: a config
// is carried whole in the spec of every submit and deploy (base64 in
// JSON, a third larger), so it is the config that must be smaller, or
// the data in it fed to the job another way. A deploy whose plan makes it
// large (many tasks) is lowered with the parallelism. Else the server's
// max_payload is what is left to raise.
func payloadAdvice(req any, size int) string {
	var spec *jobspec.Spec
	deploy := false
	switch r := req.(type) {
	case Deploy:
		spec, deploy = r.Spec, true
	case *Deploy:
		spec, deploy = r.Spec, true
	case SubmitRequest:
		spec = r.Spec
	case RestoreRequest:
		spec = r.Spec
	}
	if spec != nil {
		var big *jobspec.Operator
		for i := range spec.Operators {
			if op := &spec.Operators[i]; big == nil || len(op.Config) > len(big.Config) {
				big = op
			}
		}
		if big != nil && base64.StdEncoding.EncodedLen(len(big.Config)) >= size/2 {
			return fmt.Sprintf("operator %s's config is %d bytes (%d in the request, base64), too big to send with the job: "+
				"keep a config to settings, and feed large data to the job as a source (a stream an operator reads) or build it into the module; "+
				"or raise the server's max_payload", big.Name, len(big.Config), base64.StdEncoding.EncodedLen(len(big.Config)))
		}
	}
	if deploy {
		return "the job's plan of tasks is too big to deploy: lower the operators' parallelism, or raise the server's max_payload"
	}
	return "raise the server's max_payload"
}

// decodeReply decodes data, the reply to a request sent to subject, into
// out, or returns the error it carries (*RemoteError).
func decodeReply(subject string, data []byte, out any) error {
	var rep Reply
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("decode reply of %s: %w", subject, err)
	}
	if rep.Error != "" {
		return &RemoteError{Subject: subject, Msg: rep.Error, Code: rep.Code, FailureKind: rep.FailureKind, FailureTask: rep.FailureTask}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode reply of %s: %w", subject, err)
		}
	}
	return nil
}

// Headers of an answer sent in parts (respond): one larger than the
// server's max_payload goes as several messages to the request's reply
// subject, each with the answer's ID (HeaderAnswer) and which part of
// how many it is (HeaderPart, "0/3" for the first of three); the
// requester puts them together in order (answers). An answer that fits
// is one message without them, as before parts existed.
const (
	HeaderAnswer = "Weir-Answer"
	HeaderPart   = "Weir-Part"
)

// partRoom is what respond leaves of max_payload for a part's headers.
const partRoom = 256

// maxParts is the most parts answers accepts of one answer: a part that
// claims more is refused rather than allocated for.
const maxParts = 1 << 16

// respond answers msg, received on nc, with v (or an error reply if
// encoding fails): in one message if it fits the server's max_payload,
// else in parts (HeaderPart). An answer that cannot be sent is replaced
// by an error reply that says why, so that the requester learns it
// instead of waiting out its deadline.
func respond(nc *nats.Conn, msg *nats.Msg, v any) {
	if msg.Reply == "" {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(Reply{Error: "encode reply: " + err.Error()})
	}
	if err := sendAnswer(nc, msg.Reply, data); err != nil {
		why, _ := json.Marshal(Reply{Error: fmt.Sprintf("%s: the answer of %d bytes could not be sent: %v", msg.Subject, len(data), err)})
		_ = nc.Publish(msg.Reply, why)
	}
}

// sendAnswer publishes data to reply on nc, in parts if it is larger
// than the server's max_payload.
func sendAnswer(nc *nats.Conn, reply string, data []byte) error {
	limit := int(nc.MaxPayload())
	if len(data) <= limit {
		err := nc.Publish(reply, data)
		if !errors.Is(err, nats.ErrMaxPayload) { // else: a reconnect lowered it
			return err
		}
		limit = int(nc.MaxPayload())
	}
	size := limit - partRoom
	if size <= 0 {
		return fmt.Errorf("the server's max_payload of %d bytes leaves no room for a part of it; raise max_payload", limit)
	}
	n := (len(data) + size - 1) / size
	if n > maxParts {
		return fmt.Errorf("it would take %d parts of %d bytes, more than the %d a requester accepts; raise the server's max_payload", n, size, maxParts)
	}
	id := nuid.Next()
	for i := range n {
		m := nats.NewMsg(reply)
		m.Header.Set(HeaderAnswer, id)
		m.Header.Set(HeaderPart, fmt.Sprintf("%d/%d", i, n))
		m.Data = data[i*size : min(len(data), (i+1)*size)]
		if err := nc.PublishMsg(m); err != nil {
			return fmt.Errorf("part %d of %d: %w", i+1, n, err)
		}
	}
	return nil
}

// answers receives the answers to requests on an inbox of its own, and
// puts those sent in parts together (respond).
type answers struct {
	inbox string
	sub   *nats.Subscription
	parts map[string]*partial // by HeaderAnswer
}

// partial is an answer in parts, of which got have come.
type partial struct {
	data [][]byte
	got  int
}

// subscribeAnswers subscribes to a new inbox on nc.
func subscribeAnswers(nc *nats.Conn) (*answers, error) {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	return &answers{inbox: inbox, sub: sub}, nil
}

func (a *answers) close() { _ = a.sub.Unsubscribe() }

// next returns the next whole answer — a message, or the parts of one
// put together, in a message with the first part's headers — or the
// error of waiting for it (ctx's, or nats.ErrNoResponders). Parts of
// several answers (to several tries of a read) may interleave.
func (a *answers) next(ctx context.Context) (*nats.Msg, error) {
	for {
		m, err := a.sub.NextMsgWithContext(ctx)
		if err != nil {
			return m, err
		}
		id := m.Header.Get(HeaderAnswer)
		if id == "" {
			return m, nil
		}
		var i, n int
		if _, err := fmt.Sscanf(m.Header.Get(HeaderPart), "%d/%d", &i, &n); err != nil || n < 1 || n > maxParts || i < 0 || i >= n {
			return nil, fmt.Errorf("a part of an answer with a bad %s header %q (want index/count)", HeaderPart, m.Header.Get(HeaderPart))
		}
		if a.parts == nil {
			a.parts = map[string]*partial{}
		}
		p := a.parts[id]
		if p == nil {
			p = &partial{data: make([][]byte, n)}
			a.parts[id] = p
		}
		if len(p.data) != n {
			return nil, fmt.Errorf("parts of answer %s say %d and %d parts", id, len(p.data), n)
		}
		if p.data[i] == nil {
			p.got++
		}
		p.data[i] = append([]byte{}, m.Data...)
		if p.got < n {
			continue
		}
		delete(a.parts, id)
		m.Data = bytes.Join(p.data, nil)
		return m, nil
	}
}
