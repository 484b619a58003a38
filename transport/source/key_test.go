package source

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
)

// keys returns each record's key by its value (the message number).
func keys(t *testing.T, recs []abi.Record) map[int]string {
	t.Helper()
	out := make(map[int]string, len(recs))
	for _, r := range recs {
		v, err := strconv.Atoi(string(r.Value))
		if err != nil {
			t.Fatalf("record value %q", r.Value)
		}
		if _, dup := out[v]; dup {
			t.Fatalf("message %d read twice", v)
		}
		out[v] = string(r.Key)
	}
	return out
}

// A core source with KeyFromSubject keys each record by the subject its
// message came on, under a wildcard subscription, whether or not the
// message has a Weir-Key header; the default still reads the header.
func TestCoreSourceKeyFromSubject(t *testing.T) {
	nc, _ := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bySubject, err := NewCore(nc, CoreConfig{Subject: "orders.>", Key: KeyFromSubject})
	must(t, err)
	defer bySubject.Close()
	byHeader, err := NewCore(nc, CoreConfig{Subject: "orders.>"})
	must(t, err)
	defer byHeader.Close()

	// Longer than the 32 bytes a conversion could copy on the stack.
	long := "orders." + strings.Repeat("x", 40) + ".1"
	subjects := []string{"orders.eu.1234", "orders.us.7", "orders.eu.1234.lines.2", long}
	const n = 40
	subj := func(i int) string { return subjects[i%len(subjects)] }
	hdr := func(i int) string {
		if i%3 == 0 {
			return ""
		}
		return "h" + strconv.Itoa(i)
	}
	for i := range n {
		m := nats.NewMsg(subj(i))
		m.Data = []byte(strconv.Itoa(i))
		if h := hdr(i); h != "" {
			m.Header.Set(KeyHeader, h)
		}
		must(t, nc.PublishMsg(m))
	}
	recs, _ := pollRecords(t, ctx, bySubject, n)
	for i, k := range keys(t, recs) {
		if k != subj(i) {
			t.Errorf("key from subject: message %d (header %q) keyed %q, want its subject %q", i, hdr(i), k, subj(i))
		}
	}
	recs, _ = pollRecords(t, ctx, byHeader, n)
	for i, k := range keys(t, recs) {
		if k != hdr(i) {
			t.Errorf("key from header: message %d on %s keyed %q, want %q", i, subj(i), k, hdr(i))
		}
	}
}

// A JetStream source with KeyFromSubject and a filter keys each record by
// its subject: read from the start, after a restore from an offset, and in
// each of two parallel subtasks. The default still reads the header.
func TestJetStreamKeyFromSubject(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"orders.>", "returns.>"}})
	const n = 300
	// Messages 0, 5, 10, ... are returns, outside the filter; the others
	// orders over a few regions and ids.
	subj := func(i int) string {
		if i%5 == 0 {
			return "returns.eu." + strconv.Itoa(i)
		}
		return fmt.Sprintf("orders.%s.%d", [...]string{"eu", "us", "ap"}[i%3], i%7)
	}
	publishN(t, ctx, js, subj, 0, n) // each with Weir-Key "k"
	const orders = n - n/5
	cfg := JetStreamConfig{Stream: "IN", FilterSubjects: []string{"orders.>"}, Key: KeyFromSubject, MaxBatchRecords: 16}
	check := func(what string, recs []abi.Record) {
		t.Helper()
		for i, k := range keys(t, recs) {
			if k != subj(i) || !strings.HasPrefix(k, "orders.") {
				t.Fatalf("%s: message %d keyed %q, want its subject %q", what, i, k, subj(i))
			}
		}
	}

	src, err := NewJetStream(js, cfg)
	must(t, err)
	first, off := pollRecords(t, ctx, src, orders/2)
	must(t, src.Close())
	check("first read", first)

	again, err := NewJetStream(js, cfg)
	must(t, err)
	must(t, again.Seek(ctx, off))
	rest, _ := pollRecords(t, ctx, again, orders-len(first))
	must(t, again.Close())
	check("after restore", rest)
	if got := len(keys(t, append(first, rest...))); got != orders {
		t.Fatalf("%d distinct orders read, want %d", got, orders)
	}

	read := 0
	for idx := range 2 {
		c := cfg
		c.Parallelism, c.Index = 2, idx
		want := 0
		for i := range n {
			if s := subj(i); strings.HasPrefix(s, "orders.") && PartitionOf(s, 2) == idx {
				want++
			}
		}
		src, err := NewJetStream(js, c)
		must(t, err)
		recs, _ := pollRecords(t, ctx, src, want)
		must(t, src.Close())
		check(fmt.Sprintf("subtask %d of 2", idx), recs)
		for i := range keys(t, recs) {
			if PartitionOf(subj(i), 2) != idx {
				t.Errorf("subtask %d read message %d of subtask %d", idx, i, PartitionOf(subj(i), 2))
			}
		}
		read += len(recs)
	}
	if read != orders {
		t.Fatalf("the subtasks read %d orders, want %d", read, orders)
	}

	byHeader, err := NewJetStream(js, JetStreamConfig{Stream: "IN", FilterSubjects: []string{"orders.>"}})
	must(t, err)
	defer byHeader.Close()
	recs, _ := pollRecords(t, ctx, byHeader, orders)
	for i, k := range keys(t, recs) {
		if k != "k" {
			t.Fatalf("key from header: message %d keyed %q, want the header's \"k\"", i, k)
		}
	}
}

// Under KeyFromSubject a partitioned source's key is the subject the
// stream stored, after its subject transform put the partition in.
func TestJetStreamKeyFromTransformedSubject(t *testing.T) {
	ctx, js := partitionedStream(t)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Partitions: 6, PartitionFilter: "in.{p}.*", Key: KeyFromSubject})
	must(t, err)
	defer src.Close()
	recs, _ := pollRecords(t, ctx, src, 600)
	for i, k := range keys(t, recs) {
		tok := strings.Split(k, ".")
		ok := len(tok) == 3 && tok[0] == "in" && tok[2] == key(i)
		if ok {
			p, err := strconv.Atoi(tok[1])
			ok = err == nil && p >= 0 && p < 6
		}
		if !ok {
			t.Fatalf("message %d keyed %q, want in.<partition>.%s", i, k, key(i))
		}
	}
}

func TestUnknownKeyFrom(t *testing.T) {
	if _, err := NewJetStream(nil, JetStreamConfig{Stream: "IN", Key: KeyFromSubject + 1}); err == nil || !strings.Contains(err.Error(), "unknown key source") {
		t.Errorf("jetstream source with an unknown KeyFrom: %v", err)
	}
	if _, err := NewCore(nil, CoreConfig{Subject: "in", Key: -1}); err == nil || !strings.Contains(err.Error(), "unknown key source") {
		t.Errorf("core source with an unknown KeyFrom: %v", err)
	}
}

// onMsgCase is one message's way into a source's accumulator, add, and
// reset, which empties the batch as Poll does but keeps its buffer.
type onMsgCase struct{ add, reset func() }

// onMsgCases are the onMsgCase of each source and KeyFrom; the subject and
// the header's value are longer than the 32 bytes a conversion could copy
// on the stack.
func onMsgCases(t testing.TB) map[string]onMsgCase {
	subject := "orders.eu." + strings.Repeat("1234", 10)
	h := nats.Header{}
	h.Set(KeyHeader, strings.Repeat("key-", 10))
	value := make([]byte, 64)
	reset := func(a *accumulator) func() {
		return func() {
			a.mu.Lock()
			a.b.Reset()
			a.mu.Unlock()
		}
	}
	cases := map[string]onMsgCase{}
	for _, k := range []struct {
		name string
		key  KeyFrom
	}{{"header", KeyFromHeader}, {"subject", KeyFromSubject}} {
		c := &Core{cfg: CoreConfig{Key: k.key}, acc: newAccumulator(1<<30, 1<<30, 1)}
		cm := &nats.Msg{Subject: subject, Header: h, Data: value}
		cases["core/"+k.name] = onMsgCase{func() { c.onMsg(cm) }, reset(c.acc)}

		s, err := NewJetStream(nil, JetStreamConfig{Stream: "IN", Key: k.key, MaxBatchRecords: 1 << 30, MaxBatchBytes: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		jm := &nats.Msg{Subject: subject, Reply: "$JS.ACK.IN.cons.1.7.7.1700000000000000000.0", Header: h, Data: value}
		ja, _ := parseAck(jm.Reply)
		cases["jetstream/"+k.name] = onMsgCase{func() {
			if !s.onMsg(0, jm, ja) {
				t.Fatal("onMsg refused the message")
			}
		}, reset(s.acc)}
	}
	return cases
}

// Taking the key, from the header or the subject, allocates nothing per
// message: the accumulator copies the key into the batch, and the
// conversion from string to bytes before it copies nothing.
func TestOnMsgAllocs(t *testing.T) {
	for name, c := range onMsgCases(t) {
		// Grow the batch's buffer first: its growth is amortized over
		// batches, not per message.
		for range 2000 {
			c.add()
		}
		c.reset()
		if n := testing.AllocsPerRun(1000, c.add); n != 0 {
			t.Errorf("%s: %v allocations per message, want 0", name, n)
		}
	}
}

// BenchmarkOnMsg is the cost of one message from the NATS client's
// callback into the batch, for each source and KeyFrom, in batches of
// 4096.
func BenchmarkOnMsg(b *testing.B) {
	cases := onMsgCases(b)
	for _, name := range []string{"core/header", "core/subject", "jetstream/header", "jetstream/subject"} {
		c := cases[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				c.add()
				if i%4096 == 4095 {
					c.reset()
				}
			}
		})
	}
}
