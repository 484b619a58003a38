package job

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/transport/storage"
)

// removeEmptyCheckpointDirs removes, where the checkpoint store is a
// directory (storage.Dir), the directories of job's checkpoints that hold
// no object — a checkpoint whose uploads were cut (aborted, failed over)
// leaves the directory its snapshot's Put made, and no listing of objects
// finds it — and then job's own directory if that is empty. Only chk-N
// directories below below (0: any) are touched, and only empty ones (with
// the empty directories in them): nothing another run of the name writes,
// nor another job's. It returns how many checkpoint directories went.
func removeEmptyCheckpointDirs(c *checkpoint.Catalog, job string, below int64) int {
	seen := map[string]bool{}
	n := 0
	for _, s := range []storage.Store{c.State, c.Meta} {
		d, ok := s.(*storage.Dir)
		if !ok || seen[d.Root()] {
			continue
		}
		seen[d.Root()] = true
		if storage.CheckKey(job+"/x") != nil {
			continue // no key of the job's: nothing of it here
		}
		jobDir := filepath.Join(d.Root(), filepath.FromSlash(job))
		entries, err := os.ReadDir(jobDir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			num, ok := strings.CutPrefix(e.Name(), "chk-")
			id, err := strconv.ParseInt(num, 10, 64)
			if !e.IsDir() || !ok || err != nil || below > 0 && id >= below {
				continue
			}
			if removeEmptyTree(filepath.Join(jobDir, e.Name())) {
				n++
			}
		}
		if rest, err := os.ReadDir(jobDir); err == nil && len(rest) == 0 {
			_ = os.Remove(jobDir)
		}
	}
	return n
}

// removeEmptyTree removes dir if it holds nothing but empty directories,
// and reports whether it did; a directory with a file in it stays, with
// the empty directories in it removed.
func removeEmptyTree(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	empty := true
	for _, e := range entries {
		if !e.IsDir() || !removeEmptyTree(filepath.Join(dir, e.Name())) {
			empty = false
		}
	}
	return empty && os.Remove(dir) == nil
}
