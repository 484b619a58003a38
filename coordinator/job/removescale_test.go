package job

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
)

// What a removal of a job with thousands of checkpoints asks of each
// beside hundreds of other jobs — does a job need it (neededBy), whose
// advice names it (advisedFrom) — reads only what it needs of each job,
// not its whole status: in a user trial, weir job rm of a job with 15833
// checkpoints beside many jobs gave up after 3 minutes, in neededBy →
// job.status. The answers are those of the jobs as they are: a job
// started from one of the checkpoints that runs needs it, an ended job
// whose latest it is is advised anew. The time it took is logged, as a
// figure to compare, not checked.
func TestRemovalChecksBesideManyJobs(t *testing.T) {
	const jobs, checkpoints = 300, 3000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "big", "checkpointing: {disabled: true}\n"))
	if _, err := e.api.CancelJob(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	m := e.mgr
	big, err := m.job("big")
	if err != nil {
		t.Fatal(err)
	}
	// Jobs beside it, known to the manager as a restarted one knows
	// ended jobs from their records: ended, one with its latest
	// checkpoint; and one running that started from big's checkpoint 17.
	add := func(name string, state control.JobState, latest int64, from *checkpoint.Metadata) {
		s := *big.spec
		s.Name = name
		k := newJob(m, &s, big.plan, nil, checkpoint.NewMachine(name, checkpoint.Config{}, nil, 1), from)
		k.st.State, k.st.LatestCheckpoint = state, latest
		m.mu.Lock()
		m.jobs[name] = k
		m.mu.Unlock()
	}
	for i := range jobs {
		add(fmt.Sprintf("other-%03d", i), control.JobCanceled, 5, nil)
	}
	add("copy", control.JobRunning, 0, &checkpoint.Metadata{Job: "big", ID: 17})
	add("ended-copy", control.JobCanceled, 0, &checkpoint.Metadata{Job: "big", ID: 23})

	start := time.Now()
	needed, advised := map[int64]string{}, map[int64]int{}
	for id := int64(1); id <= checkpoints; id++ {
		if why := m.neededBy("big", id); why != "" {
			needed[id] = why
		}
		if a := m.advisedFrom("big", id); len(a) > 0 {
			advised[id] = len(a)
		}
	}
	took := time.Since(start)
	t.Logf("neededBy and advisedFrom of %d checkpoints beside %d jobs: %v (%v a checkpoint)", checkpoints, jobs+3, took, took/checkpoints)
	want := "job copy is running, and a failover restores it (the job started from it and has completed no checkpoint of its own since)"
	if len(needed) != 1 || needed[17] != want {
		t.Errorf("needed: %v; want 17: %s", needed, want)
	}
	if len(advised) != 1 || advised[23] != 1 {
		t.Errorf("advised anew by removal: %v; want 23 (ended-copy started from it)", advised)
	}

	start = time.Now()
	needs := m.needsOf("big")
	for id := int64(1); id <= checkpoints; id++ {
		if why := needs.why(id); (why != "") != (id == 17) {
			t.Errorf("checkpoint %d: needed %q", id, why)
		}
	}
	t.Logf("RemoveJob's check of %d checkpoints, the jobs read once: %v", checkpoints, time.Since(start))
}
