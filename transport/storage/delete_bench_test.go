package storage

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// BenchmarkDiscard measures what discarding one checkpoint of a job costs
// (Delete of its prefix, 4 task snapshots) in a bucket that also holds
// other objects (other jobs' retained checkpoints), on a real embedded
// server, by its prefix (Delete) and by its keys (DeleteKey, as
// Catalog.DiscardCompleted deletes). The time to put the checkpoint back
// is not counted. A delete that lists the whole bucket costs in
// proportion to others; one that looks up only what it deletes does not.
func BenchmarkDiscard(b *testing.B) {
	_, js := embeddedtest.Connect(b, embeddedtest.Server(b, embedded.Config{}))
	ctx := context.Background()
	obj, err := NewObjectStore(ctx, js, DefaultStateBucket, 0)
	if err != nil {
		b.Fatal(err)
	}
	kv, err := NewKV(ctx, js, DefaultMetaBucket, 0)
	if err != nil {
		b.Fatal(err)
	}
	for _, st := range []struct {
		name string
		s    Store
	}{{"kv", kv}, {"objectstore", obj}} {
		have := 0
		for _, others := range []int{10, 1000} {
			for ; have < others; have++ {
				k := fmt.Sprintf("other-%d/chk-1/task-0", have)
				if err := st.s.Put(ctx, k, bytes.NewReader([]byte("state"))); err != nil {
					b.Fatal(err)
				}
			}
			for _, byKey := range []bool{false, true} {
				how := "prefix"
				if byKey {
					how = "by-key"
				}
				b.Run(fmt.Sprintf("%s/%s/others=%d", st.name, how, others), func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						b.StopTimer()
						for task := range 4 {
							k := fmt.Sprintf("j/chk-%d/task-%d", i, task)
							if err := st.s.Put(ctx, k, bytes.NewReader([]byte("state"))); err != nil {
								b.Fatal(err)
							}
						}
						b.StartTimer()
						if !byKey {
							if err := st.s.Delete(ctx, fmt.Sprintf("j/chk-%d/", i)); err != nil {
								b.Fatal(err)
							}
							continue
						}
						for task := range 4 {
							k := fmt.Sprintf("j/chk-%d/task-%d", i, task)
							if err := st.s.(KeyDeleter).DeleteKey(ctx, k); err != nil {
								b.Fatal(err)
							}
						}
					}
				})
			}
		}
	}
}
