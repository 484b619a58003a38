package worker

import (
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/host/wasm"
)

// The defaults a worker's caps compare an unset limit with are the ones
// the host runs an operator under.
func TestCapsDefaultsAreTheHosts(t *testing.T) {
	if control.DefaultOperatorMemory != wasm.DefaultMemoryBytes || control.DefaultOperatorTimeout != wasm.DefaultCallTimeout ||
		control.DefaultOperatorSnapshotTimeout != wasm.DefaultSnapshotTimeout {
		t.Errorf("control's defaults %d, %v, %v; the host's %d, %v, %v",
			control.DefaultOperatorMemory, control.DefaultOperatorTimeout, control.DefaultOperatorSnapshotTimeout,
			wasm.DefaultMemoryBytes, wasm.DefaultCallTimeout, wasm.DefaultSnapshotTimeout)
	}
}

// -max-call-timeout bounds weir_snapshot and weir_restore too: an unset
// limits.snapshot-timeout whose default (60 s, or limits.timeout where
// longer) is over the cap runs under the cap; one set is the job's (Refuse
// holds it to the cap); without a cap, or under it, the host's default
// (0) stays.
func TestCapsSnapshotTimeout(t *testing.T) {
	op := func(timeout, snapshot time.Duration) jobspec.Operator {
		return jobspec.Operator{Name: "op", Limits: jobspec.Limits{Timeout: timeout, SnapshotTimeout: snapshot}}
	}
	for _, c := range []struct {
		cap               time.Duration
		timeout, snapshot time.Duration
		want              time.Duration
	}{
		{0, 0, 0, 0},
		{0, 0, time.Hour, time.Hour},
		{10 * time.Second, 0, 0, 10 * time.Second},
		{10 * time.Second, 0, 5 * time.Second, 5 * time.Second},
		{2 * time.Minute, 0, 0, 0},
		{2 * time.Minute, 90 * time.Second, 0, 0},
		{2 * time.Minute, 2 * time.Minute, 0, 0},
		{90 * time.Second, 80 * time.Second, 0, 0},
	} {
		if got := (control.Caps{MaxCallTimeout: c.cap}).SnapshotTimeout(op(c.timeout, c.snapshot)); got != c.want {
			t.Errorf("cap %v, limits.timeout %v, limits.snapshot-timeout %v: snapshot timeout %v, want %v", c.cap, c.timeout, c.snapshot, got, c.want)
		}
	}
}
