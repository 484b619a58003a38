package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/storage"
)

// A discard that Claim refuses deletes nothing: one that another request
// removes is dropped, one needed for now is tried again with the next
// discards (and deleted once Claim lets it) and, still refused as the
// runner ends, is left stored with a line saying what removes it. Claim's
// done comes after each discard it let through, not before.
func TestClaimRefusedDiscardIsKept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := &Catalog{Meta: dir, State: dir}
	for _, id := range []int64{1, 2, 3, 4} {
		if err := dir.Put(ctx, StateKey("j", id, "a-0"), strings.NewReader("state")); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(id int64) bool {
		keys, err := dir.List(ctx, StatePrefix("j", id))
		if err != nil {
			t.Fatal(err)
		}
		return len(keys) > 0
	}
	var mu sync.Mutex
	needed := map[int64]bool{1: true, 4: true}
	claims := map[int64]int{}
	var claimErr error
	claim := func(id int64) (func(), error) {
		mu.Lock()
		defer mu.Unlock()
		claims[id]++
		switch {
		case id == 2:
			return nil, fmt.Errorf("checkpoint 2: %w", ErrBeingRemoved)
		case needed[id]:
			return nil, fmt.Errorf("checkpoint %d: job k is running, and a failover restores it", id)
		}
		return func() {
			if keys, err := dir.List(ctx, StatePrefix("j", id)); err != nil || len(keys) > 0 {
				mu.Lock()
				claimErr = fmt.Errorf("claim of %d done with its state stored: %v (%v)", id, keys, err)
				mu.Unlock()
			}
		}, nil
	}
	var logs bytes.Buffer
	r := NewRunner(NewMachine("j", Config{}, nil, 0), cat, &fakeEffects{},
		RunnerOptions{Claim: claim, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); r.discarder(ctx, stop) }()

	waitClaims := func(id int64, n int) {
		t.Helper()
		for {
			mu.Lock()
			c := claims[id]
			mu.Unlock()
			if c >= n {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("checkpoint %d claimed %d times, want %d", id, c, n)
			case <-time.After(time.Millisecond):
			}
		}
	}
	r.queueDiscard(DiscardAction{ID: 1}) // needed
	r.queueDiscard(DiscardAction{ID: 2}) // removed by another request
	waitClaims(2, 1)
	if !stored(1) || !stored(2) {
		t.Fatal("a discard Claim refused deleted the checkpoint")
	}
	mu.Lock()
	needed[1] = false
	mu.Unlock()
	r.queueDiscard(DiscardAction{ID: 3}) // and 1 again, not 2
	r.queueDiscard(DiscardAction{ID: 4}) // needed to the end
	waitClaims(4, 1)
	close(stop)
	<-done
	for id, want := range map[int64]bool{1: false, 2: true, 3: false, 4: true} {
		if stored(id) != want {
			t.Errorf("checkpoint %d stored: %v, want %v", id, stored(id), want)
		}
	}
	if claims[2] != 1 {
		t.Errorf("checkpoint 2, which another request removes, claimed %d times, want once", claims[2])
	}
	if claimErr != nil {
		t.Error(claimErr)
	}
	if !strings.Contains(logs.String(), "checkpoint kept past retention: weir checkpoint rm j 4 removes it once nothing needs it") ||
		strings.Count(logs.String(), "kept past retention") != 1 {
		t.Errorf("log:\n%s\nwant one line saying that checkpoint 4 is kept", logs.String())
	}
}
