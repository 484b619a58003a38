package host_test

import (
	"math"
	"testing"

	"github.com/weirhq/weir/host"
)

func TestEndedPortsMask(t *testing.T) {
	many := func(from, to int) []int {
		var ps []int
		for p := from; p < to; p++ {
			ps = append(ps, p)
		}
		return ps
	}
	for _, c := range []struct {
		name  string
		ended []int
		ports int
		want  int64
	}{
		{"none", nil, 2, 0},
		{"port 0", []int{0}, 1, 1},
		{"ports 0 and 2", []int{0, 2}, 3, 0b101},
		{"port 62", []int{62}, 63, 1 << 62},
		{"every port of 70", many(0, 70), 70, -1},
		{"ports 63 and up of 70", many(63, 70), 70, math.MinInt64},
		{"some ports from 63 on: none of them", []int{1, 63, 64}, 70, 0b10},
	} {
		if got := host.EndedPortsMask(c.ended, c.ports); got != c.want {
			t.Errorf("%s: %b, want %b", c.name, got, c.want)
		}
		m := host.CheckpointMetrics{EndedPorts: c.want}
		if back := host.MetricsFromMap(m.Map()); back.EndedPorts != c.want {
			t.Errorf("%s: %b through Map and back", c.name, back.EndedPorts)
		}
	}
}

// MetricSourceEnded is reported for a BoundedSource's task only, 0 or 1.
func TestSourceEndedMetric(t *testing.T) {
	for _, m := range []host.CheckpointMetrics{{}, {BoundedSource: true}, {BoundedSource: true, SourceEnded: true}} {
		got := m.Map()
		v, ok := got[host.MetricSourceEnded]
		if ok != m.BoundedSource || (ok && (v == 1) != m.SourceEnded) {
			t.Errorf("%+v: %s = %d, %v", m, host.MetricSourceEnded, v, ok)
		}
		if back := host.MetricsFromMap(got); back.BoundedSource != m.BoundedSource || back.SourceEnded != m.SourceEnded {
			t.Errorf("%+v: %+v through Map and back", m, back)
		}
	}
}

// SourcePosition tells offsets apart, never 0 but for no offset, and
// MetricSourcePosition is reported only for a task that has one.
func TestSourcePositionMetric(t *testing.T) {
	a, b := host.SourcePosition([]byte{1, 2, 3}), host.SourcePosition([]byte{1, 2, 4})
	if a == 0 || b == 0 || a == b || a != host.SourcePosition([]byte{1, 2, 3}) || host.SourcePosition(nil) != 0 {
		t.Fatalf("positions %d, %d (and %d for no offset)", a, b, host.SourcePosition(nil))
	}
	if _, ok := (host.CheckpointMetrics{}).Map()[host.MetricSourcePosition]; ok {
		t.Error("a task with no source position reports one")
	}
	m := host.CheckpointMetrics{SourcePosition: a}
	if got := m.Map()[host.MetricSourcePosition]; got != a {
		t.Errorf("%s = %d, want %d", host.MetricSourcePosition, got, a)
	}
	if back := host.MetricsFromMap(m.Map()); back.SourcePosition != a {
		t.Errorf("%d through Map and back", back.SourcePosition)
	}
}
