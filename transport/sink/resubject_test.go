package sink

import (
	"encoding/binary"
	"errors"
	"testing"
)

// stateV3 encodes st as version 3 wrote it: no subject recorded.
func stateV3(st []staged) []byte {
	out := binary.LittleEndian.AppendUint32([]byte("WEOS\x03"), uint32(len(st)))
	for _, e := range st {
		out = binary.LittleEndian.AppendUint64(out, uint64(e.id))
		out = binary.LittleEndian.AppendUint64(out, uint64(e.at))
		out = binary.LittleEndian.AppendUint32(out, e.chunk)
		out = binary.LittleEndian.AppendUint32(out, e.chunkBytes)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(e.batch)))
		out = append(out, e.batch...)
	}
	return out
}

// The state records each checkpoint's subject from version 4 on; older
// states decode without one (re-committed on the sink's subject), and a
// recorded subject that is no sink subject is malformed state.
func TestStateRecordsTheSubject(t *testing.T) {
	st := []staged{{id: 1, at: 5, batch: batchOf(0, 3), subject: "orders.{key}.created"}, {id: 2, at: 6, batch: batchOf(3, 4), subject: "out"}}
	got, err := decodeState(encodeState(st))
	must(t, err)
	if len(got) != 2 || got[0].subject != "orders.{key}.created" || got[1].subject != "out" || got[1].at != 6 || string(got[1].batch) != string(st[1].batch) {
		t.Fatalf("decoded %+v", got)
	}
	got, err = decodeState(stateV3(st))
	must(t, err)
	if len(got) != 2 || got[0].subject != "" || got[0].at != 5 || string(got[0].batch) != string(st[0].batch) {
		t.Fatalf("version 3 decoded as %+v", got)
	}
	for _, bad := range []string{"out.*", "a..b", "{key}"} {
		if _, err := decodeState(encodeState([]staged{{id: 1, batch: batchOf(0, 1), subject: bad}})); !errors.Is(err, ErrMalformedState) {
			t.Errorf("subject %q: %v", bad, err)
		}
	}
}
