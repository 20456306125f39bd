package fsutil

import (
	"fmt"
	"io/fs"
	"syscall"
)

// Version identifies one version of a file as a stat shows it: device,
// inode, size and modification time. A file replaced by rename (a new
// inode) or rewritten has another Version. It is the one "has this file
// changed since I read it?" check of kaas; it is small (40 bytes) so that a
// resident group or transactional id can keep one.
type Version struct {
	dev, ino    uint64
	size, mtime int64
	set         bool // false: no file
}

// VersionOf is the Version a stat describes.
func VersionOf(fi fs.FileInfo) Version {
	v := Version{size: fi.Size(), mtime: fi.ModTime().UnixNano(), set: true}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		v.dev, v.ino = uint64(st.Dev), st.Ino
	}
	return v
}

// String is v as text, equal for equal versions.
func (v Version) String() string {
	if !v.set {
		return ""
	}
	return fmt.Sprintf("%d:%d:%d:%d", v.dev, v.ino, v.size, v.mtime)
}

// IsSet reports whether v describes a file (the zero Version is "no file").
func (v Version) IsSet() bool { return v.set }

// Same reports whether fi describes the version v: same file (inode), same
// size, same modification time.
func (v Version) Same(fi fs.FileInfo) bool { return v.set && fi != nil && v == VersionOf(fi) }
