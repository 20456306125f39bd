package powerfs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"syscall"
)

// graveDir is the hidden directory, at the root of the backing directory,
// that keeps what a pending unlink, rmdir or replacing rename took away, so
// that a cut can put it back. The mount never shows it.
const graveDir = ".powerfs-graves"

// entryKind is the kind of a namespace operation in the journal.
type entryKind uint8

const (
	entryCreate entryKind = iota + 1 // a regular file created, or a hard link added
	entryMkdir                       // a directory created
	entryRemove                      // a file unlinked or a directory removed
	entryRename                      // a rename, possibly over an existing entry
)

func (k entryKind) String() string {
	switch k {
	case entryCreate:
		return "create"
	case entryMkdir:
		return "mkdir"
	case entryRemove:
		return "remove"
	case entryRename:
		return "rename"
	}
	return "entryKind(" + strconv.Itoa(int(k)) + ")"
}

// entry is one namespace operation applied to the backing directory and not
// yet durable. Paths are slash-separated and relative to the backing root.
type entry struct {
	kind  entryKind
	path  string // create, mkdir, remove: the name; rename: the source
	to    string // rename: the target
	grave string // remove: where the entry went; rename: where the replaced target went ("" when none)
	ino   uint64 // remove, rename with a grave: the inode in the grave
}

// touches reports whether the entry changes directory dir.
func (e entry) touches(dir string) bool {
	if parent(e.path) == dir {
		return true
	}
	return e.kind == entryRename && parent(e.to) == dir
}

func parent(p string) string {
	d := path.Dir(p)
	if d == "." {
		return ""
	}
	return d
}

// journal is the ordered list of namespace operations since the last
// durable point. Operations become durable in order (a prefix at a time),
// as in a journaling file system: an fsync of directory D commits every
// pending operation up to and including the last one that changed D.
//
// Not safe for concurrent use: FS.ns guards it.
type journal struct {
	root    string // the backing directory
	mount   string // names graves with seq: random, one per Mount
	seq     uint64 // names graves
	pending []entry
	// deleted is called with the inode of every grave deleted for good.
	deleted func(ino uint64)
}

func (j *journal) abs(p string) string { return filepath.Join(j.root, filepath.FromSlash(p)) }

// graveName returns a fresh grave path (relative), unique to this mount
// (several mounts may share one backing directory and its graveyard).
func (j *journal) graveName() string {
	j.seq++
	return graveDir + "/" + j.mount + "-" + strconv.FormatUint(j.seq, 10)
}

// commitDir makes durable every pending operation up to and including the
// last one that changed dir. It returns how many were committed.
func (j *journal) commitDir(dir string) (int, error) {
	last := -1
	for i, e := range j.pending {
		if e.touches(dir) {
			last = i
		}
	}
	return j.commit(last + 1)
}

// commitAll makes every pending operation durable.
func (j *journal) commitAll() (int, error) { return j.commit(len(j.pending)) }

// commit makes the first n pending operations durable: their graves are
// deleted for good.
func (j *journal) commit(n int) (int, error) {
	var errs []error
	for _, e := range j.pending[:n] {
		if e.grave == "" {
			continue
		}
		if err := os.RemoveAll(j.abs(e.grave)); err != nil {
			errs = append(errs, fmt.Errorf("powerfs: delete grave %s of %s: %w", e.grave, e.path, err))
		} else if j.deleted != nil && e.ino != 0 {
			j.deleted(e.ino)
		}
	}
	j.pending = append(j.pending[:0], j.pending[n:]...)
	return n, errors.Join(errs...)
}

// undo reverts every pending operation, newest first: what a cut does to
// the namespace. The live namespace was reached by applying them in order,
// so reverting them in reverse order is exact.
func (j *journal) undo() (int, error) {
	var errs []error
	n := len(j.pending)
	for i := n - 1; i >= 0; i-- {
		if err := j.revert(j.pending[i]); err != nil {
			errs = append(errs, err)
		}
	}
	j.pending = j.pending[:0]
	return n, errors.Join(errs...)
}

func (j *journal) revert(e entry) error {
	var err error
	switch e.kind {
	case entryCreate:
		err = os.Remove(j.abs(e.path))
	case entryMkdir:
		err = syscall.Rmdir(j.abs(e.path))
	case entryRemove:
		err = os.Rename(j.abs(e.grave), j.abs(e.path))
	case entryRename:
		err = os.Rename(j.abs(e.to), j.abs(e.path))
		if err == nil && e.grave != "" {
			err = os.Rename(j.abs(e.grave), j.abs(e.to))
		}
	}
	if err != nil {
		return fmt.Errorf("powerfs: undo %s %s: %w", e.kind, e.path, err)
	}
	return nil
}
