package main

import "testing"

// weir up's banner says what its Ctrl-C stops: "stops everything" was
// said of weir up -nats -workers 0 too, whose Ctrl-C stops no task.
func TestUpBannerSaysWhatCtrlCStops(t *testing.T) {
	for _, c := range []struct {
		external bool
		workers  int
		want     string
	}{
		{false, 1, "Ctrl-C stops everything"},
		{true, 0, "Ctrl-C stops the coordinator only: tasks on the weir workers run on; weir job stop or cancel stops a job"},
		{true, 2, "Ctrl-C stops the coordinator and its 2 workers; tasks on other weir workers run on"},
	} {
		if got := ctrlCStops(c.external, c.workers); got != c.want {
			t.Errorf("external %v, %d workers: %q, want %q", c.external, c.workers, got, c.want)
		}
	}
}
