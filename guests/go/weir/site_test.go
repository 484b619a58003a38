package weir

import "testing"

// The frames panicSite passes over: the standard library's, told by the
// first element of the import path, and the SDK's.
func TestFrameClasses(t *testing.T) {
	for _, c := range []struct {
		fn       string
		standard bool
	}{
		{"strings.Repeat", true},
		{"bytes.(*Buffer).grow", true},
		{"encoding/json.(*decodeState).value", true},
		{"internal/bytealg.IndexByte", true},
		{"main.(*op).Process", false},
		{"main.(*op).Process-range1", false},
		{"main.main.func1", false},
		{"example.com/me/ops.(*x).Process", false},
		{"github.com/me/ops/internal/parse.Line", false},
		{"github.com/weirhq/weir/guests/go/weir.exportProcess", false},
	} {
		if got := isStandard(c.fn); got != c.standard {
			t.Errorf("isStandard(%q) = %v", c.fn, got)
		}
	}
	for _, c := range []struct {
		fn string
		in bool
	}{
		{sdkPackage + ".exportProcess.func1", true},
		{sdkPackage + ".(*Batch).Next", true},
		{sdkPackage + "x.Foo", false},
		{sdkPackage + "/sub.Foo", false},
		{"main.(*op).Process", false},
	} {
		if got := inPackage(c.fn, sdkPackage); got != c.in {
			t.Errorf("inPackage(%q, %q) = %v", c.fn, sdkPackage, got)
		}
	}
	if sdkPackage != "github.com/weirhq/weir/guests/go/weir" {
		t.Errorf("sdkPackage = %q", sdkPackage)
	}
}
