package host

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/stream"
)

// tagged is an element with the input channel it came from.
type tagged struct {
	ch int
	e  stream.Element
}

// spillBuffer holds the elements of blocked channels during an alignment:
// in memory up to budget bytes, then appended to a temporary file. The file
// is removed when the buffer's sequence has been read or discarded.
type spillBuffer struct {
	dir     string
	budget  int64
	mem     []tagged
	memSize int64
	file    *os.File
	w       *bufio.Writer
	total   int64 // bytes accounted (Element.Size) of everything added
	spilled int64 // of which went to the file
	spillN  int   // elements in the file
	frame   []byte
}

func newSpillBuffer(dir string, budget int64) *spillBuffer {
	return &spillBuffer{dir: dir, budget: budget}
}

func (s *spillBuffer) empty() bool { return len(s.mem) == 0 && s.spillN == 0 }

// add appends e from channel ch.
func (s *spillBuffer) add(ch int, e stream.Element) error {
	n := int64(e.Size())
	s.total += n
	if s.file == nil && s.memSize+n <= s.budget {
		s.mem = append(s.mem, tagged{ch, e})
		s.memSize += n
		return nil
	}
	if s.file == nil {
		f, err := os.CreateTemp(s.dir, "weir-align-*.spill")
		if err != nil {
			return fmt.Errorf("alignment buffer: spill: %w", err)
		}
		s.file, s.w = f, bufio.NewWriterSize(f, 64<<10)
	}
	s.frame = binary.LittleEndian.AppendUint32(s.frame[:0], uint32(ch))
	s.frame = snapshot.AppendElement(s.frame, e)
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], uint32(len(s.frame)))
	if _, err := s.w.Write(hdr[:]); err != nil {
		return fmt.Errorf("alignment buffer: spill: %w", err)
	}
	if _, err := s.w.Write(s.frame); err != nil {
		return fmt.Errorf("alignment buffer: spill: %w", err)
	}
	s.spilled += n
	s.spillN++
	return nil
}

// sequence turns the buffer into a readable sequence; the buffer must not be
// used afterwards.
func (s *spillBuffer) sequence() (*sequence, error) {
	q := &sequence{mem: s.mem}
	if s.file != nil {
		if err := s.w.Flush(); err != nil {
			s.discard()
			return nil, fmt.Errorf("alignment buffer: spill: %w", err)
		}
		if _, err := s.file.Seek(0, io.SeekStart); err != nil {
			s.discard()
			return nil, fmt.Errorf("alignment buffer: spill: %w", err)
		}
		q.file, q.r, q.fileN = s.file, bufio.NewReaderSize(s.file, 64<<10), s.spillN
		s.file = nil
	}
	return q, nil
}

// discard drops everything and removes the spill file.
func (s *spillBuffer) discard() {
	if s.file != nil {
		s.file.Close()
		os.Remove(s.file.Name())
		s.file = nil
	}
	s.mem = nil
}

// sequence is a released alignment buffer (or recovered channel state) read
// back in order.
type sequence struct {
	mem   []tagged
	file  *os.File
	r     *bufio.Reader
	fileN int
	buf   []byte
}

// next returns the next element; ok is false at the end, where the spill
// file is removed.
func (q *sequence) next() (tagged, bool, error) {
	if len(q.mem) > 0 {
		t := q.mem[0]
		q.mem[0] = tagged{}
		q.mem = q.mem[1:]
		return t, true, nil
	}
	if q.fileN == 0 {
		q.close()
		return tagged{}, false, nil
	}
	var hdr [4]byte
	if _, err := io.ReadFull(q.r, hdr[:]); err != nil {
		return tagged{}, false, fmt.Errorf("alignment buffer: read spill: %w", err)
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if cap(q.buf) < int(n) {
		q.buf = make([]byte, n)
	}
	q.buf = q.buf[:n]
	if _, err := io.ReadFull(q.r, q.buf); err != nil {
		return tagged{}, false, fmt.Errorf("alignment buffer: read spill: %w", err)
	}
	if n < 5 {
		return tagged{}, false, fmt.Errorf("alignment buffer: read spill: frame of %d bytes is too short", n)
	}
	e, _, err := snapshot.ReadElement(q.buf[4:])
	if err != nil {
		return tagged{}, false, fmt.Errorf("alignment buffer: read spill: %w", err)
	}
	q.fileN--
	return tagged{ch: int(binary.LittleEndian.Uint32(q.buf)), e: e}, true, nil
}

func (q *sequence) close() {
	if q.file != nil {
		q.file.Close()
		os.Remove(q.file.Name())
		q.file = nil
	}
	q.mem = nil
	q.fileN = 0
}
