package wasm

import (
	"io/fs"
	"syscall"
	"time"
)

// accessed returns when the file info describes was last read, as the
// file system records it (zero where it does not say): under Linux's
// default mount option, relatime, a read updates it when it is older than
// the last write or a day old.
func accessed(info fs.FileInfo) time.Time {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return time.Time{}
	}
	return time.Unix(st.Atim.Unix())
}
