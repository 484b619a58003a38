package source

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzParseAckReply feeds arbitrary reply subjects to the ack-reply parser:
// it never panics, and what it accepts holds the numbers it returns.
func FuzzParseAckReply(f *testing.F) {
	f.Add("$JS.ACK.IN.cons.1.42.7.1700000000000000000.3")
	f.Add("$JS.ACK.dom.hash.IN.cons.1.43.8.1700000000000000001.0.rnd")
	f.Add("$JS.ACK.IN.cons.1.99999999999999999999.7.1.3")
	f.Add("")
	f.Fuzz(func(t *testing.T, reply string) {
		seq, ts, ok := parseAckReply(reply)
		if !ok {
			if seq != 0 || ts != 0 {
				t.Fatalf("rejected %q but returned %d %d", reply, seq, ts)
			}
			return
		}
		if !strings.HasPrefix(reply, "$JS.ACK.") {
			t.Fatalf("accepted %q", reply)
		}
		tokens := strings.Split(reply, ".")
		if !holds(tokens, seq) || !holds(tokens, ts) {
			t.Fatalf("%q: %d %d are not tokens of the subject", reply, seq, ts)
		}
	})
}

// holds reports whether a token is the decimal form of v.
func holds(tokens []string, v uint64) bool {
	for _, t := range tokens {
		if n, err := strconv.ParseUint(t, 10, 64); err == nil && n == v {
			return true
		}
	}
	return false
}
