package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A printed command leaves out -nats when the server it names is the one
// $WEIR_NATS names, which the next command reaches without it; it keeps
// -nats for another server, and for the default one when $WEIR_NATS
// names another (the next command would go there).
func TestNATSHintWithWeirNATS(t *testing.T) {
	t.Setenv(natsEnv, "nats://127.0.0.1:14222")
	for url, want := range map[string]string{
		"nats://127.0.0.1:14222": "",
		"nats://10.0.0.5:4222":   " -nats nats://10.0.0.5:4222",
		defaultNATS:              " -nats " + defaultNATS,
	} {
		f := natsFlags{url: url}
		if got := f.hint(); got != want {
			t.Errorf("hint for %q with $%s=nats://127.0.0.1:14222: %q, want %q", url, natsEnv, got, want)
		}
	}
}

// weir job status (and every job subcommand of one job) given no job asks
// which, and says that weir job ls lists them.
func TestJobCommandWithoutAJobPointsToJobLs(t *testing.T) {
	for _, sub := range []string{"status", "stop", "cancel"} {
		var out, errb syncBuffer
		code := run(t.Context(), []string{"job", sub}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		if want := "weir: job " + sub + ": which job? weir job " + sub + " "; code != 2 || !strings.HasPrefix(errb.String(), want) ||
			!strings.HasSuffix(errb.String(), " (weir job ls lists the jobs)\n") {
			t.Errorf("weir job %s: exit %d, stderr %q; want 2, %q… (weir job ls lists the jobs)", sub, code, errb.String(), want)
		}
	}
}

// weir stream ls says how much a stream stores in the units the rest of
// the CLI uses, not in bytes (a trial read 115702011 bytes).
func TestStreamListSaysSizeInUnits(t *testing.T) {
	var b bytes.Buffer
	printStreams(&b, []*jetstream.StreamInfo{{Config: jetstream.StreamConfig{Name: "LINES", Subjects: []string{"lines.>"}},
		State: jetstream.StreamState{Msgs: 100000, Bytes: 115702011, FirstSeq: 1, LastSeq: 100000}}})
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[0], " SIZE ") || !strings.Contains(lines[1], " 110.3 MiB ") {
		t.Errorf("weir stream ls:\n%s\nwant a SIZE column with 110.3 MiB", b.String())
	}
}
