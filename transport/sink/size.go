package sink

import (
	"fmt"
	"strconv"

	"github.com/weirhq/weir/abi"
)

// checkSizes refuses a batch with a record whose message would exceed
// maxPayload, the server's max_payload (0: not known, nothing checked),
// naming the record: the first such record fails the write before any of
// the batch is published or staged, with an error wrapping
// ErrRecordTooLarge. A message carries a record's key (in KeyHeader) and
// value, and headers(r) bytes besides them; most bounds headers(r) over
// every record, for a batch too small to hold a record that does not
// fit. bound says headers(r) is a bound, not the exact figure. The error
// does not name the sink.
func checkSizes(batch []byte, maxPayload, most int64, bound bool, headers func(abi.Record) int64) error {
	if maxPayload <= 0 || int64(len(batch))+most <= maxPayload {
		return nil // no record of it can be larger than the whole batch
	}
	it, err := abi.NewIter(batch)
	if err != nil {
		return err
	}
	for i := 1; it.Next(); i++ { // counted from 1 in messages: record 1 is the first
		r := it.Record()
		h := headers(r)
		if int64(len(r.Key))+int64(len(r.Value))+h <= maxPayload {
			continue
		}
		upTo := ""
		if bound {
			upTo = "up to "
		}
		return fmt.Errorf("record %d of the batch (key %s): %w: a record of %d bytes (key %d, value %d) and its headers (%s%d bytes) exceed the server's max_payload of %d bytes; "+
			"emit smaller records, or raise the server's max_payload",
			i, quoteKey(r.Key), ErrRecordTooLarge, len(r.Key)+len(r.Value), len(r.Key), len(r.Value), upTo, h, maxPayload)
	}
	return it.Err()
}

// quoteKey quotes a record's key for an error, its first 64 bytes where
// it is longer (as transport/subject's errors do).
func quoteKey(key []byte) string {
	if len(key) > 64 {
		return fmt.Sprintf("%q… (%d bytes)", key[:64], len(key))
	}
	return strconv.Quote(string(key))
}

// NATS message headers as nats.go encodes them: the version line and the
// blank line that ends them, and ": " and CRLF around each value.
const (
	natsHeaderFrame = len("NATS/1.0\r\n") + len("\r\n")
	natsHeaderField = len(": \r\n")
)

// coreHeaders returns the bytes a core sink's message of r takes besides
// its key and value: none without headers; else the frame, the
// KeyHeader's name (with a key) and the TimeHeader with its value (with
// timestamps, for a record that has one).
func coreHeaders(r abi.Record, timestamps bool) int64 {
	n := 0
	if len(r.Key) > 0 {
		n += len(KeyHeader) + natsHeaderField
	}
	if timestamps && r.Timestamp != 0 {
		n += len(TimeHeader) + natsHeaderField + len(strconv.FormatInt(r.Timestamp, 10))
	}
	if n > 0 {
		n += natsHeaderFrame
	}
	return int64(n)
}

// coreHeadersMost bounds coreHeaders.
const coreHeadersMost = int64(natsHeaderFrame + len(KeyHeader) + len(TimeHeader) + 2*natsHeaderField + 20)

// jetStreamHeaders bounds the bytes a message of a JetStream sink takes
// besides its key and value: the KeyHeader's name, the TimeHeader with its
// value where the sink publishes timestamps, and MessageOverhead for the
// frame and the headers JetStream's publishes add (message ids, batch
// headers).
func jetStreamHeaders(timestamps bool) int64 {
	n := int64(len(KeyHeader)) + MessageOverhead
	if timestamps {
		n += int64(len(TimeHeader)) + 20 // an int64 in decimal
	}
	return n
}
