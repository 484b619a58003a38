package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The summary counts and lists each sink's latest value per key apart: a
// trial's job had an exactly-once sink on agg.{key} and a core sink dash
// of the same 99 000 users, and weir run said "latest value per key:
// 198272 keys", the two sinks' keys summed.
func TestSummaryKeysPerSink(t *testing.T) {
	latest := map[string]string{}
	for _, k := range []string{"u1", "u2", "u3"} {
		latest["agg\x00"+k] = "a" + k
		latest["dash\x00"+k] = "d" + k
	}
	latest["dash\x00u4"] = "du4"
	for _, c := range []struct {
		show int
		want string
	}{
		{0, "latest value per key: agg 3 keys, dash 4 keys (-show N lists them)\n"},
		{2, "latest value per key:\n  [agg] u1\tau1\n  [agg] u2\tau2\n  … 1 more keys of agg (-show)\n" +
			"  [dash] u1\tdu1\n  [dash] u2\tdu2\n  … 2 more keys of dash (-show)\n"},
		{-1, "latest value per key:\n  [agg] u1\tau1\n  [agg] u2\tau2\n  [agg] u3\tau3\n" +
			"  [dash] u1\tdu1\n  [dash] u2\tdu2\n  [dash] u3\tdu3\n  [dash] u4\tdu4\n"},
	} {
		var buf bytes.Buffer
		out := &output{std: Stdio{Out: &buf}, show: c.show, latest: latest, bySink: map[string]int{}, since: map[string]uint64{}}
		summary(context.Background(), &buf, out, 4)
		if _, got, _ := strings.Cut(buf.String(), "records out\n"); got != c.want {
			t.Errorf("-show %d: printed\n%s\nwant the keys\n%s", c.show, buf.String(), c.want)
		}
	}
}
