package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

func TestOpen(t *testing.T) {
	nc := embeddedtest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, dir := range []string{t.TempDir(), ""} {
		c, err := Open(ctx, Config{NC: nc, StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.State.Put(ctx, "j/chk-1/a-0", strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(ctx)
		ready := make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx, ready) }()
		<-ready
		if jobs, err := control.NewAPIClient(nc, "").Jobs(ctx); err != nil || len(jobs) != 0 {
			t.Errorf("jobs = %v %v", jobs, err)
		}
		rcancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
