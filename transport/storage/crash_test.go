package storage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
)

// crashDirEnv names the data directory of the process that
// TestDeletesSurviveAServerCrash starts and kills.
const crashDirEnv = "WEIR_STORAGE_CRASH_DIR"

// crashStores opens the object store and the KV bucket on an embedded
// server with its file store in dir.
func crashStores(t *testing.T, dir string) (*embedded.Server, *ObjectStore, *KV) {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{Port: -1, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	obj, err := NewObjectStore(ctx, js, DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := NewKV(ctx, js, DefaultMetaBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	return srv, obj, kv
}

// What was deleted stays deleted when the server holding the buckets dies
// (kill -9, power loss) and recovers its file store: the checkpoints a job
// discarded, and those `weir checkpoint rm` removed, must not come back.
// nats-server v2.15.2 lost on recovery the removals of a KV purge followed
// by a purge of its marker (the puts came back), which a checkpoint
// catalog then listed as hundreds of corrupt checkpoints.
func TestDeletesSurviveAServerCrash(t *testing.T) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		// The process to kill: put, delete all but the last three, die.
		_, obj, kv := crashStores(t, dir)
		ctx := context.Background()
		for _, s := range []Store{obj, kv} {
			for id := 1; id <= 40; id++ {
				if err := s.Put(ctx, fmt.Sprintf("j/chk-%d/_metadata", id), bytes.NewReader([]byte("meta"))); err != nil {
					t.Fatal(err)
				}
				if id > 3 {
					if err := s.Delete(ctx, fmt.Sprintf("j/chk-%d/", id-3)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	if testing.Short() {
		t.Skip("runs a process it kills: skipped in -short")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeletesSurviveAServerCrash$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the process to kill ended otherwise (%v):\n%s", err, out)
	}
	srv, obj, kv := crashStores(t, dir)
	defer srv.Shutdown()
	want := []string{"j/chk-38/_metadata", "j/chk-39/_metadata", "j/chk-40/_metadata"}
	for _, s := range []interface {
		Store
		Location() string
	}{obj, kv} {
		keys, err := s.List(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, want) {
			t.Errorf("%s after the crash: %d keys %v…; want %v", s.Location(), len(keys), keys[:min(len(keys), 5)], want)
		}
	}
}
