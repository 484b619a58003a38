package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/jobspec"
)

// clusterServers is how many servers of its cluster nc knows: those it
// was given and those the servers told it of.
func clusterServers(nc *nats.Conn) int {
	if nc == nil {
		return 1
	}
	return max(len(nc.Servers()), 1)
}

// coordinatorReplicas returns how many replicas the coordinator keeps
// its job records with (bucket weir_jobs: weir up -nats -replicas N), 0
// when there are none to read (no weir up ran on this NATS yet).
func coordinatorReplicas(ctx context.Context, js jetstream.JetStream) int {
	st, err := js.Stream(ctx, "KV_"+jetStreamJobsBucket)
	if err != nil {
		return 0
	}
	return st.CachedInfo().Config.Replicas
}

// defaultReplicas is the replicas weir run -nats gives the streams it
// creates without -replicas: the coordinator's (coord), capped by the
// servers of the cluster, with what the line that says it was created
// adds; 1 where the coordinator's are not known. A trial's 3-node
// cluster got streams of 1 replica, which did not survive the loss of
// their server, from a coordinator that ran with -replicas 3.
func defaultReplicas(coord, servers int) (int, string) {
	switch {
	case coord <= 0:
		return 1, ""
	case coord > servers:
		return servers, fmt.Sprintf("as many as the %d servers this connection knows; the coordinator keeps its job records with %d; -replicas N sets another", servers, coord)
	}
	return coord, fmt.Sprintf("as the coordinator keeps its job records (weir up -replicas %d); -replicas N sets another", coord)
}

// fewerReplicasWarning warns of a stream created with fewer replicas than
// the cluster has servers: it does not survive the loss of the servers
// that keep it. "" where it has as many.
func fewerReplicasWarning(stream string, replicas, servers int) string {
	if replicas >= servers {
		return ""
	}
	return fmt.Sprintf("weir: warning: stream %s has %d replica(s) on a cluster of %d servers: it does not survive the loss of a server that keeps it; to keep it on more, remove it (weir stream rm %s) while it holds nothing you need, and create it again with -replicas %d",
		stream, replicas, servers, stream, min(servers, 5))
}

// missingStreams names the streams of spec that createStreams would
// create (streamsToCreate) that are not there now.
func missingStreams(ctx context.Context, js jetstream.JetStream, spec *jobspec.Spec) []string {
	var out []string
	for _, cfg := range streamsToCreate(spec, 1) {
		if _, err := js.Stream(ctx, cfg.Name); errors.Is(err, jetstream.ErrStreamNotFound) {
			out = append(out, cfg.Name)
		}
	}
	return out
}

// sayReplicas says, of the streams created (the names), why they have
// the replicas they have (note, from defaultReplicas: "" says nothing),
// and warns of those with fewer than the cluster's servers.
func sayReplicas(std Stdio, created []string, replicas int, note string, servers int) {
	if len(created) == 0 {
		return
	}
	if note != "" {
		fmt.Fprintf(std.Out, "stream(s) %s: %d replica(s), %s\n", strings.Join(created, ", "), replicas, note)
	}
	for _, name := range created {
		if w := fewerReplicasWarning(name, replicas, servers); w != "" {
			fmt.Fprintln(std.Err, w)
		}
	}
}

// flagGiven reports whether fs's flag name was given.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
