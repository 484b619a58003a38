package weir

import (
	"errors"
	"fmt"
	"io"
)

// ChunkSize is the size of the chunks StateWriter hands to the host and
// StateReader asks the host for.
const ChunkSize = 64 << 10

// StateWriter streams an operator's snapshot to the host in ChunkSize
// chunks. It is an io.Writer; it is valid only during Snapshot.
type StateWriter struct {
	buf []byte
	err error
	// started is set by the first write: a keyed state must come first.
	started bool
	// keyed is set by NewKeyedStateWriter: the keyed state is the whole
	// snapshot, so Write fails.
	keyed bool
}

// Write appends p to the state stream. After NewKeyedStateWriter it
// fails, and so does the snapshot, whatever Snapshot returns: bytes after
// (or between) the keyed state's entries would make a state in neither
// the keyed layout nor one of the operator's own.
func (w *StateWriter) Write(p []byte) (int, error) {
	if w.err == nil && w.keyed && len(p) > 0 {
		w.err = errStateAfterKeyed
	}
	return w.append(p)
}

var errStateAfterKeyed = errors.New("weir: other state after KeyedStateWriter: the keyed layout is the whole snapshot (write every entry with the KeyedStateWriter, nothing with the StateWriter itself)")

// append appends p to the state stream: Write's bytes, and the keyed
// state's.
func (w *StateWriter) append(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.started = w.started || len(p) > 0
	n := 0
	for len(p) > 0 {
		if len(w.buf) == 0 && len(p) >= ChunkSize {
			// A whole chunk: hand it over without copying.
			if err := w.write(p[:ChunkSize]); err != nil {
				return n, err
			}
			p = p[ChunkSize:]
			n += ChunkSize
			continue
		}
		if w.buf == nil {
			w.buf = make([]byte, 0, ChunkSize)
		}
		c := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+c]
		p = p[c:]
		n += c
		if len(w.buf) == cap(w.buf) {
			if err := w.Flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// copyIn appends p to the state stream as append does, but always through
// the buffer: it never hands p itself to the host, so p does not escape
// (a key converted from a string for it is not allocated).
func (w *StateWriter) copyIn(p []byte) error {
	if w.err != nil {
		return w.err
	}
	w.started = w.started || len(p) > 0
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = make([]byte, 0, ChunkSize)
		}
		c := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+c]
		p = p[c:]
		if len(w.buf) == cap(w.buf) {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteByte appends one byte.
func (w *StateWriter) WriteByte(c byte) error {
	var b [1]byte
	b[0] = c
	_, err := w.Write(b[:])
	return err
}

// Flush hands the buffered bytes to the host. The SDK flushes after
// Snapshot returns; operators need not call it.
func (w *StateWriter) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) == 0 {
		return nil
	}
	err := w.write(w.buf)
	w.buf = w.buf[:0]
	return err
}

func (w *StateWriter) write(p []byte) error {
	if rc := snapshotWrite(p); rc != 0 {
		w.err = fmt.Errorf("weir: snapshot_write: %s", statusText(rc))
		return w.err
	}
	return nil
}

func (w *StateWriter) reset() {
	w.buf = w.buf[:0]
	w.err = nil
	w.started = false
	w.keyed = false
}

// StateReader reads the state stream a snapshot wrote, during Restore. It
// is an io.Reader and an io.ByteReader; it buffers ChunkSize bytes, so
// small reads cost no host call.
type StateReader struct {
	buf      []byte
	off, end int
	eof      bool
	err      error
}

// Read reads up to len(p) bytes of the state stream. It returns io.EOF at
// the end of the stream.
func (r *StateReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.off == r.end {
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf[r.off:r.end])
	r.off += n
	return n, nil
}

// ReadByte reads one byte.
func (r *StateReader) ReadByte() (byte, error) {
	if r.off == r.end {
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	c := r.buf[r.off]
	r.off++
	return c, nil
}

func (r *StateReader) fill() error {
	if r.err != nil {
		return r.err
	}
	if r.eof {
		return io.EOF
	}
	if r.buf == nil {
		r.buf = make([]byte, ChunkSize)
	}
	n := restoreRead(r.buf)
	switch {
	case n == 0:
		r.eof = true
		return io.EOF
	case n < 0:
		r.err = fmt.Errorf("weir: restore_read: %s", statusText(n))
		return r.err
	case int(n) > len(r.buf):
		r.err = errors.New("weir: restore_read returned more than asked")
		return r.err
	}
	r.off, r.end = 0, int(n)
	return nil
}

// take returns the next n bytes of the state stream: a slice of the
// reader's buffer when they lie in it whole, else gathered in *scratch,
// which grows as the bytes arrive (a length far past the end of the
// stream allocates no more than the stream holds). The slice is valid
// until the next read. At the end of the stream it returns io.EOF if it
// read nothing, io.ErrUnexpectedEOF if it read some.
func (r *StateReader) take(n int, scratch *[]byte) ([]byte, error) {
	if n >= 0 && r.end-r.off >= n {
		b := r.buf[r.off : r.off+n : r.off+n]
		r.off += n
		return b, nil
	}
	s := (*scratch)[:0]
	for len(s) < n {
		if r.off == r.end {
			if err := r.fill(); err != nil {
				if err == io.EOF && len(s) > 0 {
					err = io.ErrUnexpectedEOF
				}
				return nil, err
			}
		}
		c := min(n-len(s), r.end-r.off)
		s = append(s, r.buf[r.off:r.off+c]...)
		r.off += c
	}
	*scratch = s
	return s, nil
}

// atEnd reports whether the whole state stream has been read.
func (r *StateReader) atEnd() (bool, error) {
	if r.off < r.end {
		return false, nil
	}
	switch err := r.fill(); err {
	case nil:
		return false, nil
	case io.EOF:
		return true, nil
	default:
		return false, err
	}
}

func (r *StateReader) reset() {
	r.off, r.end, r.eof, r.err = 0, 0, false, nil
}
