package checkpoint

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"testing"

	"github.com/weirhq/weir/transport/storage"
)

// flakyGets fails every Get of key with err.
type flakyGets struct {
	storage.Store
	key string
	err error
}

func (s flakyGets) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if key == s.key {
		return nil, s.err
	}
	return s.Store.Get(ctx, key)
}

// A checkpoint whose state handle names another checkpoint's object is
// corrupt when that object is gone, but not when it cannot be read for
// now (a NATS outage, a stream without a leader): Latest then fails, to
// be tried again, instead of skipping it for an older checkpoint, whose
// restore an exactly-once sink would commit again under new ids.
func TestHandleOfAnotherCheckpointReadFailsForNow(t *testing.T) {
	st, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := &Catalog{Meta: st, State: st}
	writeCheckpoint(t, c, 1)
	// Checkpoint 2 keeps op-0's state of checkpoint 1.
	md := &Metadata{Job: "j", ID: 2, Triggered: at(20), Completed: at(30), Handles: map[string]string{"op-0": StateKey("j", 1, "op-0")}}
	if err := c.Write(ctx, md); err != nil {
		t.Fatal(err)
	}
	outage := errors.New("nats: connection closed")
	c.State = flakyGets{st, StateKey("j", 1, "op-0"), outage}
	if _, err := c.Read(ctx, "j", 2); !errors.Is(err, outage) || errors.Is(err, ErrCorrupt) {
		t.Errorf("read while the handle's object cannot be read: %v; want the outage, not corrupt", err)
	}
	if md, skipped, err := c.Latest(ctx, "j", []int64{1, 2}); !errors.Is(err, outage) || md != nil || len(skipped) != 0 {
		t.Errorf("latest while the handle's object cannot be read: %+v, skipped %v, %v; want the outage, nothing skipped", md, skipped, err)
	}
	c.State = flakyGets{st, StateKey("j", 1, "op-0"), &fs.PathError{Op: "open", Path: "j/chk-1/op-0", Err: fs.ErrNotExist}}
	if _, err := c.Read(ctx, "j", 2); !errors.Is(err, ErrCorrupt) {
		t.Errorf("read with the handle's object gone: %v; want corrupt", err)
	}
}
