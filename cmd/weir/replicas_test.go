package main

import "testing"

// weir run -nats without -replicas gives the streams it creates the
// coordinator's replicas, capped by the cluster's servers: a trial's
// 3-node cluster got streams of 1 replica without a word.
func TestDefaultReplicasFollowTheCoordinators(t *testing.T) {
	for _, c := range []struct {
		coord, servers, want int
		note                 string
	}{
		{0, 3, 1, ""},
		{1, 1, 1, "as the coordinator keeps its job records (weir up -replicas 1); -replicas N sets another"},
		{3, 3, 3, "as the coordinator keeps its job records (weir up -replicas 3); -replicas N sets another"},
		{3, 2, 2, "as many as the 2 servers this connection knows; the coordinator keeps its job records with 3; -replicas N sets another"},
	} {
		if got, note := defaultReplicas(c.coord, c.servers); got != c.want || note != c.note {
			t.Errorf("coordinator %d, %d servers: %d %q; want %d %q", c.coord, c.servers, got, note, c.want, c.note)
		}
	}
	if w := fewerReplicasWarning("TINYIN", 3, 3); w != "" {
		t.Errorf("3 replicas of 3 servers warned: %q", w)
	}
	if w, want := fewerReplicasWarning("TINYIN", 1, 3), "weir: warning: stream TINYIN has 1 replica(s) on a cluster of 3 servers: it does not survive the loss of a server that keeps it; "+
		"to keep it on more, remove it (weir stream rm TINYIN) while it holds nothing you need, and create it again with -replicas 3"; w != want {
		t.Errorf("1 replica of 3 servers: %q; want %q", w, want)
	}
}
