package checkpoint

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/storage"
)

// failingDeletes is a store whose first deletes fail, as a store that is
// not available for a while fails them.
type failingDeletes struct {
	storage.Store
	left atomic.Int32 // failures left
}

func (s *failingDeletes) Delete(ctx context.Context, prefix string) error {
	if s.left.Add(-1) >= 0 {
		return errors.New("injected: store unavailable for now")
	}
	return s.Store.Delete(ctx, prefix)
}

// A discard that fails while the job runs is tried again with the next
// ones: a store that failed for a while leaves no checkpoint's objects
// behind (before, they stayed until a coordinator resumed the job).
func TestFailedDiscardIsTriedAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := &failingDeletes{Store: dir}
	cat := &Catalog{Meta: st, State: st}
	for _, id := range []int64{1, 2} {
		if err := st.Put(ctx, StateKey("j", id, "a-0"), strings.NewReader("state")); err != nil {
			t.Fatal(err)
		}
	}
	r := NewRunner(NewMachine("j", Config{}, nil, 0), cat, &fakeEffects{}, RunnerOptions{})
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); r.discarder(ctx, stop) }()

	st.left.Store(1)
	r.queueDiscard(DiscardAction{ID: 1}) // fails
	for st.left.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
	r.queueDiscard(DiscardAction{ID: 2}) // and 1 again
	close(stop)
	<-done
	for _, id := range []int64{1, 2} {
		if keys, err := dir.List(ctx, StatePrefix("j", id)); err != nil || len(keys) > 0 {
			t.Errorf("checkpoint %d left %v (%v)", id, keys, err)
		}
	}
}
