package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

// TestReplyCarriesFailureKind: an error a worker classified as a job's
// failure (WithFailureKind) reaches the requester with its kind, its
// message and its code unchanged; a reply without a kind (an older
// worker's, or an error of none) has none.
func TestReplyCarriesFailureKind(t *testing.T) {
	cause := fmt.Errorf("task wc-0: operator wc: weir_init: trap: out of memory")
	for _, c := range []struct {
		name string
		err  error
		kind FailureKind
		code error
		task string
	}{
		{"kind", WithFailureKind(cause, FailureMemoryLimit), FailureMemoryLimit, nil, ""},
		{"kind and unrecoverable", Unrecoverable(WithFailureKind(cause, FailureTrap)), FailureTrap, ErrUnrecoverable, ""},
		{"unrecoverable, then kind", WithFailureKind(Unrecoverable(cause), FailureTrap), FailureTrap, ErrUnrecoverable, ""},
		{"wrapped", fmt.Errorf("deploy: %w", WithFailureKind(cause, FailureExit)), FailureExit, nil, ""},
		{"no kind", cause, FailureUnknown, nil, ""},
		{"unknown kind", WithFailureKind(cause, FailureUnknown), FailureUnknown, nil, ""},
		{"kind and task", WithFailedTask(Unrecoverable(WithFailureKind(cause, FailureTrap)), "wc-0"), FailureTrap, ErrUnrecoverable, "wc-0"},
		{"task, wrapped", fmt.Errorf("deploy: %w", WithFailedTask(cause, "wc-1")), FailureUnknown, nil, "wc-1"},
		{"no task", WithFailedTask(cause, ""), FailureUnknown, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := FailureKindOf(c.err); got != c.kind {
				t.Errorf("FailureKindOf(local error) = %q, want %q", got, c.kind)
			}
			if !errors.Is(c.err, cause) {
				t.Errorf("%v does not wrap its cause", c.err)
			}
			data, err := json.Marshal(replyFor(c.err))
			if err != nil {
				t.Fatal(err)
			}
			got := decodeReply("weir.worker.w1.deploy", data, nil)
			var re *RemoteError
			if !errors.As(got, &re) {
				t.Fatalf("reply decoded to %v, want a *RemoteError", got)
			}
			if re.Msg != c.err.Error() || FailureKindOf(got) != c.kind || re.FailureKind != c.kind {
				t.Errorf("remote error %+v (kind %q); want message %q of kind %q", re, FailureKindOf(got), c.err.Error(), c.kind)
			}
			if FailedTaskOf(c.err) != c.task || FailedTaskOf(got) != c.task || re.FailureTask != c.task {
				t.Errorf("task %q locally, %q in the reply; want %q", FailedTaskOf(c.err), FailedTaskOf(got), c.task)
			}
			if c.code != nil && !errors.Is(got, c.code) {
				t.Errorf("remote error %v lost its code %v", got, c.code)
			}
		})
	}
	// A worker that does not send kinds.
	got := decodeReply("weir.worker.w1.deploy", []byte(`{"error":"task wc-0: boom","code":"unrecoverable"}`), nil)
	if k := FailureKindOf(got); k != FailureUnknown || FailedTaskOf(got) != "" || !errors.Is(got, ErrUnrecoverable) {
		t.Errorf("an old worker's reply decoded to %v of kind %q; want kind unknown, unrecoverable", got, k)
	}
	if k := FailureKindOf(nil); k != FailureUnknown {
		t.Errorf("FailureKindOf(nil) = %q", k)
	}
}
