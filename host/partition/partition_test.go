package partition

import (
	"fmt"
	"hash/fnv"
	"testing"

	"github.com/weirhq/weir/abi"
)

func batchOf(keys ...string) []byte {
	var rs []abi.Record
	for i, k := range keys {
		rs = append(rs, abi.Record{Key: []byte(k), Value: []byte(fmt.Sprint(i)), Timestamp: int64(i)})
	}
	return abi.EncodeBatch(rs...)
}

func TestKeyHashKeepsKeysTogetherAndOrder(t *testing.T) {
	var keys []string
	for i := 0; i < 200; i++ {
		keys = append(keys, fmt.Sprintf("k%d", i%17))
	}
	p, _ := New("key-hash")
	out, err := p.Partition(batchOf(keys...), 4)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for ch, b := range out {
		if b == nil {
			continue
		}
		rs, err := abi.DecodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		last := int64(-1)
		for _, r := range rs {
			if KeyChannel(r.Key, 4) != ch {
				t.Fatalf("key %s on channel %d", r.Key, ch)
			}
			if r.Timestamp <= last {
				t.Fatal("order changed")
			}
			last = r.Timestamp
		}
		total += len(rs)
	}
	if total != 200 {
		t.Fatalf("%d records out of 200", total)
	}
	if _, err := p.Partition([]byte{9}, 4); err == nil {
		t.Fatal("malformed batch accepted")
	}
}

func TestKeyChannelIsFNV1a(t *testing.T) {
	for _, k := range []string{"", "a", "key-17", "日本"} {
		h := fnv.New32a()
		h.Write([]byte(k))
		if got, want := KeyChannel([]byte(k), 7), int(h.Sum32()%7); got != want {
			t.Fatalf("%q: %d, want %d", k, got, want)
		}
	}
}

func TestForwardBroadcastRoundRobin(t *testing.T) {
	b := batchOf("a")
	out, _ := Forward{}.Partition(b, 1)
	if len(out) != 1 || &out[0][0] != &b[0] {
		t.Fatal("forward")
	}
	out, _ = Broadcast{}.Partition(b, 3)
	for _, o := range out {
		if o == nil {
			t.Fatal("broadcast")
		}
	}
	rr := &RoundRobin{}
	for i := 0; i < 6; i++ {
		out, _ = rr.Partition(b, 3)
		if out[i%3] == nil {
			t.Fatalf("round robin step %d", i)
		}
	}
	if _, err := New("nope"); err == nil {
		t.Fatal("unknown kind accepted")
	}
}

func BenchmarkKeyHash(b *testing.B) {
	var keys []string
	for i := 0; i < 1000; i++ {
		keys = append(keys, fmt.Sprintf("key-%d", i))
	}
	batch := batchOf(keys...)
	p := &KeyHash{}
	b.SetBytes(int64(len(batch)))
	for b.Loop() {
		if _, err := p.Partition(batch, 4); err != nil {
			b.Fatal(err)
		}
	}
}
