package plan

import (
	"errors"
	"reflect"
	"testing"
)

// TestAssignMemory: a worker's memory budget is a resource as its slots
// are: a task goes only where its memory fits beside what is placed there
// already, and a job the slots take but the memory does not waits with a
// shortfall that names the memory.
func TestAssignMemory(t *testing.T) {
	const mib = 1 << 20
	mem := map[string]int64{"a": 256 * mib, "b": 64 * mib} // c: a source or sink, none
	for _, c := range []struct {
		name    string
		plan    *Plan
		workers []Worker
		want    map[string][]string
		wantErr string
	}{
		{name: "no budget, placed as by slots", plan: tasks("a-0", "a-1"),
			workers: []Worker{{ID: "w1"}, {ID: "w2"}},
			want:    map[string][]string{"w1": {"a-0"}, "w2": {"a-1"}}},
		{name: "a task goes where its memory fits", plan: tasks("a-0", "b-0", "c-0"),
			workers: []Worker{{ID: "w1", Memory: 512 * mib, MemoryUsed: 448 * mib}, {ID: "w2", Memory: 512 * mib}},
			want:    map[string][]string{"w1": {"b-0", "c-0"}, "w2": {"a-0"}}},
		{name: "the plan's own tasks count", plan: tasks("a-0", "a-1", "a-2"),
			workers: []Worker{{ID: "w1", Memory: 512 * mib}, {ID: "w2", Memory: 256 * mib}},
			want:    map[string][]string{"w1": {"a-0", "a-2"}, "w2": {"a-1"}}},
		{name: "slots free but memory short", plan: tasks("a-0", "a-1"),
			workers: []Worker{{ID: "w1", Slots: 4, Memory: 512 * mib, MemoryUsed: 384 * mib}, {ID: "w2", Memory: 256 * mib}},
			wantErr: "assign j: needs 512MiB of operator memory (limits.memory), workers have 384MiB free (w1 128MiB of 512MiB, w2 256MiB of 256MiB)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i := range c.plan.Tasks {
				c.plan.Tasks[i].Vertex = c.plan.Tasks[i].ID[:1]
			}
			got, err := AssignMemory(c.plan, c.workers, mem)
			if c.wantErr != "" {
				var ce *CapacityError
				if !errors.As(err, &ce) || err.Error() != c.wantErr || ce.Memory != 512*mib {
					t.Fatalf("AssignMemory = %v, %v; want error %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Errorf("AssignMemory = %v, %v; want %v", got, err, c.want)
			}
		})
	}
}
