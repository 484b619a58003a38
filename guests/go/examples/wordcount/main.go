// Command wordcount is a stateful weir operator: it splits each record's
// value on ASCII whitespace and, for each word in order, increments the
// word's count and emits key=word, value=the new count in decimal, with the
// input record's timestamp.
//
// With the config {emit: final} it emits nothing while it counts, and at
// the end of its input (a bounded job) each word once with its total, in
// word order, timestamp 0: a batch word count.
//
// State (shared by every language's wordcount): byte 0x01, u32 LE n, then n
// entries sorted bytewise by word: u32 LE word length, word, u64 LE count.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/weirhq/weir/guests/go/weir"
)

const stateVersion = 1

// maxWord bounds a word's length in a state stream, so corrupt state fails
// cleanly instead of exhausting memory.
const maxWord = 16 << 20

type wordcount struct {
	counts map[string]uint64
	num    []byte // scratch for the decimal count
	final  bool   // emit totals at the end of input only
}

func (w *wordcount) Init(config []byte) error {
	w.counts = make(map[string]uint64)
	if len(config) == 0 {
		return nil
	}
	var c struct {
		Emit string `json:"emit"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		return fmt.Errorf("wordcount: config %q: want {emit: final} or nothing: %w", config, err)
	}
	switch c.Emit {
	case "", "each":
	case "final":
		w.final = true
	default:
		return fmt.Errorf("wordcount: config emit %q: want each (the default) or final", c.Emit)
	}
	return nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (w *wordcount) Process(port int, in *weir.Batch, out *weir.Emitter) error {
	for in.Next() {
		r := in.Record()
		v := r.Value
		for i := 0; i < len(v); {
			for i < len(v) && isSpace(v[i]) {
				i++
			}
			j := i
			for j < len(v) && !isSpace(v[j]) {
				j++
			}
			if j > i {
				word := v[i:j]
				n := w.counts[string(word)] + 1 // the lookup does not allocate
				w.counts[string(word)] = n      // allocates only for a new word
				if !w.final {
					w.num = strconv.AppendUint(w.num[:0], n, 10)
					out.Emit(0, word, w.num, r.Timestamp)
				}
			}
			i = j
		}
	}
	return nil
}

// EndOfInput emits every word's total, in word order, with {emit: final}.
func (w *wordcount) EndOfInput(port int, out *weir.Emitter) error {
	if !w.final {
		return nil
	}
	for _, k := range w.sorted() {
		w.num = strconv.AppendUint(w.num[:0], w.counts[k], 10)
		out.Emit(0, []byte(k), w.num, 0)
	}
	return nil
}

// sorted returns the words counted, in order.
func (w *wordcount) sorted() []string {
	words := make([]string, 0, len(w.counts))
	for k := range w.counts {
		words = append(words, k)
	}
	slices.Sort(words)
	return words
}

func (w *wordcount) Snapshot(sw *weir.StateWriter) error {
	words := w.sorted()
	bw := bufio.NewWriterSize(sw, weir.ChunkSize)
	var h [8]byte
	bw.WriteByte(stateVersion)
	binary.LittleEndian.PutUint32(h[:], uint32(len(words)))
	bw.Write(h[:4])
	for _, k := range words {
		binary.LittleEndian.PutUint32(h[:], uint32(len(k)))
		bw.Write(h[:4])
		bw.WriteString(k)
		binary.LittleEndian.PutUint64(h[:], w.counts[k])
		bw.Write(h[:8])
	}
	return bw.Flush()
}

func (w *wordcount) Restore(sr *weir.StateReader) error {
	w.counts = make(map[string]uint64)
	var h [8]byte
	if _, err := io.ReadFull(sr, h[:1]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // no state yet
		}
		return fmt.Errorf("wordcount: restore: %w", err)
	}
	if h[0] != stateVersion {
		return fmt.Errorf("wordcount: restore: unknown state version %d", h[0])
	}
	if _, err := io.ReadFull(sr, h[:4]); err != nil {
		return fmt.Errorf("wordcount: restore: count: %w", err)
	}
	n := binary.LittleEndian.Uint32(h[:4])
	for i := uint32(0); i < n; i++ {
		if _, err := io.ReadFull(sr, h[:4]); err != nil {
			return fmt.Errorf("wordcount: restore: entry %d: %w", i, err)
		}
		wl := binary.LittleEndian.Uint32(h[:4])
		if wl > maxWord {
			return fmt.Errorf("wordcount: restore: entry %d: word of %d bytes", i, wl)
		}
		word := make([]byte, wl)
		if _, err := io.ReadFull(sr, word); err != nil {
			return fmt.Errorf("wordcount: restore: entry %d: %w", i, err)
		}
		if _, err := io.ReadFull(sr, h[:8]); err != nil {
			return fmt.Errorf("wordcount: restore: entry %d: %w", i, err)
		}
		w.counts[string(word)] = binary.LittleEndian.Uint64(h[:8])
	}
	return nil
}

func init() { weir.Register(&wordcount{}) }

func main() {}
