package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// A weir worker that stops says where its tasks go only when it holds
// some: a drained one, holding none, says so instead. It says what the
// coordinator does, which is true with no other worker too: it waits for
// one.
func TestWorkerStoppingSaysWhatItHolds(t *testing.T) {
	for _, c := range []struct {
		tasks int
		want  string
	}{
		{0, "worker w2 stopping: it holds no task"},
		{1, "worker w2 stopping: the coordinator moves its 1 task to another worker, from its job's latest checkpoint, or waits until one can take it"},
		{3, "worker w2 stopping: the coordinator moves its 3 tasks to other workers, from their jobs' latest checkpoints, or waits until one can take them"},
	} {
		if got := stoppingLine("w2", c.tasks); got != c.want {
			t.Errorf("%d tasks: %q; want %q", c.tasks, got, c.want)
		}
	}

	// A worker with no task, stopped (SIGTERM: its context ends), says
	// nothing of tasks moving.
	srv := embeddedtest.Server(t, embedded.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := srv.ClientURL()
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	w, wdone := &upOutput{}, make(chan int, 1)
	go func() {
		wdone <- run(wctx, []string{"worker", "-nats", url, "-id", "idle", "-data", t.TempDir()},
			Stdio{In: strings.NewReader(""), Out: &w.out, Err: &w.errb})
	}()
	w.await(t, ctx, wdone, "worker idle connected to ")
	stopWorker()
	if code := <-wdone; code != 0 {
		t.Fatalf("weir worker exited %d: %s", code, w.errb.String())
	}
	if got := w.out.String(); !strings.Contains(got, "level=INFO msg=\"worker idle stopping: it holds no task\"\n") || strings.Contains(got, "move") {
		t.Errorf("weir worker with no task, stopped, said:\n%s", got)
	}
}
