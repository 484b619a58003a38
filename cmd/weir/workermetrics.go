package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/weirhq/weir/cmd/weir/internal/metrics"
	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
)

// healthzWait bounds how long /healthz waits for the coordinator: a
// frozen one made it hang until curl gave up (8 s in a trial).
const healthzWait = time.Second

// liveWorkers asks api for the workers and counts the live ones, giving
// up after healthzWait even where the call does not heed its context (a
// coordinator frozen while it holds a lock).
func liveWorkers(ctx context.Context, api interface {
	Workers(context.Context) ([]control.WorkerStatus, error)
}) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, healthzWait)
	defer cancel()
	type answer struct {
		ws  []control.WorkerStatus
		err error
	}
	done := make(chan answer, 1) // the call may return after the reply
	go func() {
		ws, err := api.Workers(ctx)
		done <- answer{ws, err}
	}()
	var a answer
	select {
	case a = <-done:
	case <-ctx.Done():
		return 0, fmt.Errorf("no answer within %s", healthzWait)
	}
	if a.err != nil {
		return 0, a.err
	}
	live := 0
	for _, x := range a.ws {
		if !x.Down {
			live++
		}
	}
	return live, nil
}

// serveWorkerMetrics serves weir worker -metrics on ln until the returned
// function is called: /metrics, the worker's own tasks' metrics
// (metrics.WorkerCollector), there while no coordinator is; /healthz,
// which answers within healthzWait.
func serveWorkerMetrics(ln net.Listener, n *node.Node) (stop func()) {
	w := n.Workers[0]
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(metrics.NewWorkerCollector(w.ID(), w)))
	mux.Handle("/healthz", workerHealthz(n))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { srv.Close() }
}

// workerHealthz is weir worker's /healthz: 200 while the worker is
// connected to NATS, saying whether the coordinator answers (its tasks
// run on without one); 503 while NATS is not connected.
func workerHealthz(n *node.Node) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wk := n.Workers[0]
		if !n.Conn.IsConnected() {
			http.Error(w, fmt.Sprintf("worker %s: not connected to NATS (%s): reconnecting", wk.ID(), n.Conn.Status()), http.StatusServiceUnavailable)
			return
		}
		coord := "coordinator answers"
		if live, err := liveWorkers(r.Context(), n.API); err != nil {
			coord = "coordinator unreachable (" + err.Error() + "): its tasks run on"
		} else {
			coord += fmt.Sprintf(", %d worker(s) live", live)
		}
		fmt.Fprintf(w, "ok: worker %s connected to NATS, %d task(s); %s\n", wk.ID(), wk.Tasks(), coord)
	})
}
