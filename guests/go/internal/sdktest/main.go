// Command sdktest is an operator for the SDK's own tests: its config picks
// a behaviour of Process.
//
//	panic   panic with "kaboom"
//	index   index a one-element slice by the length of each record's
//	        value (a runtime error at the first value that is not empty)
//	stdpanic  panic inside the standard library: bytes.Repeat of each
//	        value, minus its length times (at the first value that is not
//	        empty)
//	initpanic, snappanic, restorepanic, eoipanic, ckptpanic  panic in
//	        Init, Snapshot, Restore, EndOfInput, CheckpointComplete
//	error   return an error "no luck"
//	log     print to stdout and stderr and log through weir.Log, then pass through
//	exit    os.Exit(3) at the second record
//	loop    loop forever
//	snaploop, restoreloop  loop forever in Snapshot, Restore
//	oom     allocate until the memory limit is hit
//	initoom  allocate until the memory limit is hit in Init (weir_init)
//	deadlock  block on a channel no goroutine sends on
//	gopanic   panic in a goroutine Process starts and waits for
//	ports   emit each record to ports 0 and 1
//	rand    emit 16 bytes of crypto/rand per record
//	big     emit each record with its value repeated to 10 MiB (over the
//	        4 MiB input batch of an operator it goes to)
//	bigstate  Process keeps every value; Snapshot writes 300 KiB per record
//	allocs  pass records through; EndOfInput emits the heap allocations
//	        made between the second and the last Process call
//	keyedlate  Snapshot writes a version byte, then a keyed state
//	keyedlate-ignored  keyedlate, but Snapshot ignores the keyed state's
//	        errors and returns nil
//	keyednoclose  Snapshot puts k=v in a keyed state and returns without
//	        calling Close
//	state-after-keyed  Snapshot puts k=v in a keyed state, then writes a
//	        byte to the StateWriter; it ignores the errors and returns nil
//	keyed-put-after-state  Snapshot puts k=v in a keyed state, writes a
//	        byte to the StateWriter, then puts k2=v2; it ignores the errors
//	        and returns nil
//	two-keyed-writers  Snapshot puts k=v with a KeyedStateWriter, then
//	        k2=v2 with a second one; it ignores the errors and returns nil
//	empty-writes-around-keyed  Snapshot writes no bytes to the StateWriter,
//	        puts k=v in a keyed state, writes no bytes again: a correct
//	        keyed state
//	(other) pass records through
package main

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/weirhq/weir/guests/go/weir"
)

type op struct {
	mode    string
	calls   int
	mallocs [2]uint64 // at the start of the second call, at the latest call
	kept    [][]byte
	sink    [][]byte
	state   []byte
}

func (o *op) Init(config []byte) error {
	o.mode = string(config)
	if o.mode == "initpanic" {
		panic("kaboom in Init")
	}
	if o.mode == "initoom" {
		for {
			o.sink = append(o.sink, make([]byte, 1<<20))
		}
	}
	return nil
}

func (o *op) Process(port int, in *weir.Batch, out *weir.Emitter) error {
	if o.mode == "allocs" {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		o.calls++
		if o.calls == 2 {
			o.mallocs[0] = ms.Mallocs
		}
		o.mallocs[1] = ms.Mallocs
	}
	switch o.mode {
	case "panic":
		for in.Next() {
			if in.Index() == 1 {
				panic("kaboom")
			}
		}
	case "index":
		one := []int{0}
		for in.Next() {
			o.calls += one[len(in.Record().Value)]
		}
	case "stdpanic":
		for in.Next() {
			o.kept = append(o.kept, bytes.Repeat(in.Record().Value, -len(in.Record().Value)))
		}
	case "error":
		return errors.New("no luck")
	case "loop":
		for n := 0; ; n++ {
			o.state = append(o.state[:0], byte(n))
		}
	case "log":
		fmt.Println("hello stdout")
		fmt.Fprintln(os.Stderr, "hello stderr")
		weir.Log(weir.LevelWarn, "hello log")
	case "exit":
		for in.Next() {
			if in.Index() == 1 {
				os.Exit(3)
			}
		}
	case "deadlock":
		<-make(chan int)
	case "gopanic":
		done := make(chan struct{})
		go func() {
			defer close(done)
			panic("kaboom in a goroutine")
		}()
		<-done
	case "oom":
		for {
			o.sink = append(o.sink, make([]byte, 1<<20))
		}
	case "rand":
		for in.Next() {
			out.Emit(0, nil, []byte(rand.Text()), 0)
		}
		return nil
	case "big":
		for in.Next() {
			r := in.Record()
			v := bytes.Repeat(r.Value, (10<<20)/max(len(r.Value), 1)+1)
			out.Emit(0, r.Key, v[:10<<20], 0)
		}
		return nil
	case "ports":
		for in.Next() {
			out.EmitRecord(0, in.Record())
			out.EmitRecord(1, in.Record())
		}
		return nil
	case "bigstate":
		for in.Next() {
			o.kept = append(o.kept, bytes.Clone(in.Record().Value))
		}
		return nil
	}
	for r := range in.All() {
		out.EmitRecord(0, r)
	}
	return nil
}

func (o *op) Snapshot(w *weir.StateWriter) error {
	if o.mode == "snappanic" {
		panic("kaboom in Snapshot")
	}
	if o.mode == "snaploop" {
		for n := 0; ; n++ {
			o.state = append(o.state[:0], byte(n))
		}
	}
	if o.mode == "keyedlate" {
		if err := w.WriteByte(1); err != nil {
			return err
		}
		kw := weir.NewKeyedStateWriter(w)
		if err := kw.Put([]byte("k"), []byte("v")); err != nil {
			return err
		}
		return kw.Close()
	}
	if o.mode == "keyednoclose" {
		return weir.NewKeyedStateWriter(w).Put([]byte("k"), []byte("v"))
	}
	if o.mode == "state-after-keyed" || o.mode == "keyed-put-after-state" {
		kw := weir.NewKeyedStateWriter(w)
		kw.Put([]byte("k"), []byte("v"))
		w.WriteByte(1)
		if o.mode == "keyed-put-after-state" {
			kw.Put([]byte("k2"), []byte("v2"))
		}
		kw.Close()
		return nil
	}
	if o.mode == "empty-writes-around-keyed" {
		if _, err := w.Write(nil); err != nil {
			return err
		}
		kw := weir.NewKeyedStateWriter(w)
		if err := kw.Put([]byte("k"), []byte("v")); err != nil {
			return err
		}
		if _, err := w.Write(nil); err != nil {
			return err
		}
		return kw.Close()
	}
	if o.mode == "two-keyed-writers" {
		weir.NewKeyedStateWriter(w).Put([]byte("k"), []byte("v"))
		weir.NewKeyedStateWriter(w).Put([]byte("k2"), []byte("v2"))
		return nil
	}
	if o.mode == "keyedlate-ignored" {
		w.WriteByte(1)
		kw := weir.NewKeyedStateWriter(w)
		kw.Put([]byte("k"), []byte("v"))
		kw.Close()
		return nil
	}
	for _, v := range o.kept {
		chunk := bytes.Repeat(v, (300<<10)/max(len(v), 1))
		if _, err := w.Write(chunk); err != nil {
			return err
		}
	}
	return nil
}

func (o *op) Restore(r *weir.StateReader) error {
	if o.mode == "restorepanic" {
		panic("kaboom in Restore")
	}
	if o.mode == "restoreloop" {
		for n := 0; ; n++ {
			o.state = append(o.state[:0], byte(n))
		}
	}
	b, err := io.ReadAll(r)
	o.state = b
	return err
}

// EndOfInput emits the size of the restored state, or the allocation count.
func (o *op) EndOfInput(port int, out *weir.Emitter) error {
	if o.mode == "eoipanic" {
		panic("kaboom in EndOfInput")
	}
	if o.mode == "allocs" {
		out.Emit(0, nil, fmt.Appendf(nil, "%d", o.mallocs[1]-o.mallocs[0]), 0)
		return nil
	}
	out.Emit(0, nil, fmt.Appendf(nil, "%d", len(o.state)), 0)
	return nil
}

// CheckpointComplete panics in ckptpanic.
func (o *op) CheckpointComplete(id int64) error {
	if o.mode == "ckptpanic" {
		panic(fmt.Sprintf("kaboom in CheckpointComplete %d", id))
	}
	return nil
}

func init() { weir.Register(&op{}) }

func main() {}
