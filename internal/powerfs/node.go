package powerfs

import (
	"context"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is one file or directory of the mount. It holds no state of its
// own: its backing path comes from its place in go-fuse's tree, and the
// pending state of a regular file lives in FS.files by inode number.
type node struct {
	fs.Inode
	fs *FS
}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeLinker     = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
)

// rel is the node's path relative to the mount root ("" for the root).
func (n *node) rel() string {
	if n.IsRoot() {
		return ""
	}
	return n.Path(n.Root())
}

func (n *node) abs() string { return filepath.Join(n.fs.backing, filepath.FromSlash(n.rel())) }

func (n *node) child(name string) (rel, abs string) {
	rel = path.Join(n.rel(), name)
	return rel, filepath.Join(n.fs.backing, filepath.FromSlash(rel))
}

// hold calls Options.Hold, when set.
func (f *FS) hold(op string, paths ...string) {
	if f.opts.Hold != nil {
		f.opts.Hold(op, paths...)
	}
}

// hidden reports whether name in n is the graveyard, which the mount never shows.
func (n *node) hidden(name string) bool { return n.IsRoot() && name == graveDir }

func errno(err error) syscall.Errno { return fs.ToErrno(err) }

// fillAttr sets out from a backing stat, with the size and mtime that
// readers see when the file has pending state.
func (f *FS) fillAttr(st *syscall.Stat_t, out *fuse.Attr) {
	out.FromStat(st)
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return
	}
	s, _ := f.acquire(st.Ino, nil)
	if s == nil {
		return
	}
	out.Size = uint64(s.ov.size)
	out.Blocks = (out.Size + 511) / 512
	if s.mtime.After(time.Unix(int64(out.Mtime), int64(out.Mtimensec))) {
		out.SetTimes(nil, &s.mtime, &s.mtime)
	}
	s.mu.Unlock()
}

func (n *node) newChild(ctx context.Context, st *syscall.Stat_t) *fs.Inode {
	return n.NewInode(ctx, &node{fs: n.fs}, fs.StableAttr{Mode: st.Mode & syscall.S_IFMT, Ino: st.Ino})
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n.hidden(name) {
		return nil, syscall.ENOENT
	}
	_, p := n.child(name)
	n.fs.hold("lookup", path.Join(n.rel(), name))
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, errno(err)
	}
	n.fs.fillAttr(&st, &out.Attr)
	return n.newChild(ctx, &st), 0
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if h, ok := fh.(*handle); ok {
		if err := fstat(h.f, &st); err != nil {
			return errno(err)
		}
	} else if err := syscall.Lstat(n.abs(), &st); err != nil {
		return errno(err)
	}
	n.fs.fillAttr(&st, &out.Attr)
	return 0
}

func fstat(f *os.File, st *syscall.Stat_t) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), st) }); err != nil {
		return err
	}
	return serr
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	p := n.abs()
	if m, ok := in.GetMode(); ok {
		if err := syscall.Chmod(p, m); err != nil {
			return errno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		su, sg := -1, -1
		if uok {
			su = int(uid)
		}
		if gok {
			sg = int(gid)
		}
		if err := syscall.Lchown(p, su, sg); err != nil {
			return errno(err)
		}
	}
	if sz, ok := in.GetSize(); ok {
		open := func() (*os.File, error) { return os.OpenFile(p, os.O_RDWR, 0) }
		if h, ok := fh.(*handle); ok {
			open = h.dup
		}
		st, err := n.fs.acquire(n.StableAttr().Ino, open)
		if err != nil {
			return errno(err)
		}
		st.ov.truncate(int64(sz))
		st.mtime = time.Now()
		st.mu.Unlock()
	}
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	if mok || aok {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(atime.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mtime.UnixNano())
			if st, _ := n.fs.acquire(n.StableAttr().Ino, nil); st != nil {
				st.mtime = mtime
				st.mu.Unlock()
			}
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return errno(err)
		}
	}
	return n.Getattr(ctx, fh, out)
}

// openBacking opens the backing file read-write whatever the caller asked
// (the kernel enforces the caller's access mode), so that a persist can
// always write through the file's state.
func openBacking(p string, flags uint32) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.ETXTBSY) {
		f, err = os.OpenFile(p, int(flags&syscall.O_ACCMODE), 0)
	}
	return f, err
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f, err := openBacking(n.abs(), flags)
	if err != nil {
		return nil, 0, errno(err)
	}
	h := n.fs.newHandle(n, n.StableAttr().Ino, f)
	if flags&syscall.O_TRUNC != 0 {
		if e := h.truncate(0); e != 0 {
			h.Release(ctx)
			return nil, 0, e
		}
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if n.hidden(name) {
		return nil, nil, 0, syscall.EPERM
	}
	rel, p := n.child(name)
	n.fs.hold("create", rel)
	if e := n.fs.faults.check(OpCreate, rel); e != 0 {
		return nil, nil, 0, e
	}
	n.fs.ns.Lock()
	defer n.fs.ns.Unlock()
	created := true
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, os.FileMode(mode&0o7777))
	if errors.Is(err, os.ErrExist) && flags&syscall.O_EXCL == 0 {
		created = false
		f, err = openBacking(p, flags)
	}
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	var st syscall.Stat_t
	if err := fstat(f, &st); err != nil {
		f.Close()
		return nil, nil, 0, errno(err)
	}
	if created {
		n.fs.forget(st.Ino)
		n.fs.jr.pending = append(n.fs.jr.pending, entry{kind: entryCreate, path: rel})
		n.fs.commitImmediate()
	}
	ch := n.newChild(ctx, &st)
	h := n.fs.newHandle(ch.Operations().(*node), st.Ino, f)
	if !created && flags&syscall.O_TRUNC != 0 {
		if e := h.truncate(0); e != 0 {
			h.Release(ctx)
			return nil, nil, 0, e
		}
	}
	n.fs.fillAttr(&st, &out.Attr)
	return ch, h, fuse.FOPEN_DIRECT_IO, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n.hidden(name) {
		return nil, syscall.EPERM
	}
	rel, p := n.child(name)
	n.fs.hold("mkdir", rel)
	if e := n.fs.faults.check(OpCreate, rel); e != 0 {
		return nil, e
	}
	n.fs.ns.Lock()
	defer n.fs.ns.Unlock()
	if err := os.Mkdir(p, os.FileMode(mode&0o7777)); err != nil {
		return nil, errno(err)
	}
	n.fs.jr.pending = append(n.fs.jr.pending, entry{kind: entryMkdir, path: rel})
	n.fs.commitImmediate()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, errno(err)
	}
	out.Attr.FromStat(&st)
	return n.newChild(ctx, &st), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok || t.fs != n.fs {
		return nil, syscall.EXDEV
	}
	if n.hidden(name) {
		return nil, syscall.EPERM
	}
	rel, p := n.child(name)
	n.fs.hold("link", t.rel(), rel)
	if e := n.fs.faults.check(OpCreate, rel); e != 0 {
		return nil, e
	}
	n.fs.ns.Lock()
	defer n.fs.ns.Unlock()
	if err := os.Link(t.abs(), p); err != nil {
		return nil, errno(err)
	}
	n.fs.jr.pending = append(n.fs.jr.pending, entry{kind: entryCreate, path: rel})
	n.fs.commitImmediate()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, errno(err)
	}
	n.fs.fillAttr(&st, &out.Attr)
	return n.newChild(ctx, &st), 0
}

// bury moves the entry at rel into a fresh grave and returns the grave.
// Called with ns held.
func (f *FS) bury(abs string) (string, error) {
	g := f.jr.graveName()
	if err := os.Rename(abs, f.jr.abs(g)); err != nil {
		return "", err
	}
	return g, nil
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.hidden(name) {
		return syscall.EPERM
	}
	rel, p := n.child(name)
	n.fs.hold("unlink", rel)
	n.fs.ns.Lock()
	defer n.fs.ns.Unlock()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return errno(err)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return syscall.EISDIR
	}
	g, err := n.fs.bury(p)
	if err != nil {
		return errno(err)
	}
	e := entry{kind: entryRemove, path: rel, grave: g}
	if st.Nlink == 1 {
		e.ino = st.Ino
	}
	n.fs.jr.pending = append(n.fs.jr.pending, e)
	n.fs.commitImmediate()
	return 0
}

// emptyDir reports whether the directory at p has no entries.
func emptyDir(p string) (bool, error) {
	d, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return len(names) == 0, err
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if n.hidden(name) {
		return syscall.EPERM
	}
	rel, p := n.child(name)
	n.fs.hold("rmdir", rel)
	n.fs.ns.Lock()
	defer n.fs.ns.Unlock()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return errno(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return syscall.ENOTDIR
	}
	if empty, err := emptyDir(p); err != nil {
		return errno(err)
	} else if !empty {
		return syscall.ENOTEMPTY
	}
	g, err := n.fs.bury(p)
	if err != nil {
		return errno(err)
	}
	n.fs.jr.pending = append(n.fs.jr.pending, entry{kind: entryRemove, path: rel, grave: g})
	n.fs.commitImmediate()
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok || np.fs != n.fs {
		return syscall.EXDEV
	}
	if n.hidden(name) || np.hidden(newName) {
		return syscall.EPERM
	}
	if flags&^unix.RENAME_NOREPLACE != 0 {
		return syscall.EINVAL // RENAME_EXCHANGE and RENAME_WHITEOUT are not modelled
	}
	src, srcAbs := n.child(name)
	dst, dstAbs := np.child(newName)
	n.fs.hold("rename", src, dst)
	if e := n.fs.faults.check(OpRename, src, dst); e != 0 {
		return e
	}
	n.fs.ns.Lock()
	defer n.fs.ns.Unlock()
	var sst, dstSt syscall.Stat_t
	if err := syscall.Lstat(srcAbs, &sst); err != nil {
		return errno(err)
	}
	e := entry{kind: entryRename, path: src, to: dst}
	switch err := syscall.Lstat(dstAbs, &dstSt); {
	case errors.Is(err, syscall.ENOENT):
		if err := os.Rename(srcAbs, dstAbs); err != nil {
			return errno(err)
		}
	case err != nil:
		return errno(err)
	default:
		if flags&unix.RENAME_NOREPLACE != 0 {
			return syscall.EEXIST
		}
		if sst.Ino == dstSt.Ino && sst.Dev == dstSt.Dev {
			return 0 // two names of one file: rename does nothing
		}
		srcDir := sst.Mode&syscall.S_IFMT == syscall.S_IFDIR
		dstDir := dstSt.Mode&syscall.S_IFMT == syscall.S_IFDIR
		switch {
		case srcDir && !dstDir:
			return syscall.ENOTDIR
		case !srcDir && dstDir:
			return syscall.EISDIR
		}
		// Keep the replaced entry in a grave so that a cut can restore it.
		g := n.fs.jr.graveName()
		if dstDir {
			if empty, err := emptyDir(dstAbs); err != nil {
				return errno(err)
			} else if !empty {
				return syscall.ENOTEMPTY
			}
			if err := os.Rename(dstAbs, n.fs.jr.abs(g)); err != nil {
				return errno(err)
			}
		} else if err := os.Link(dstAbs, n.fs.jr.abs(g)); err != nil {
			return errno(err)
		}
		if err := os.Rename(srcAbs, dstAbs); err != nil {
			if dstDir {
				_ = os.Rename(n.fs.jr.abs(g), dstAbs)
			} else {
				_ = os.Remove(n.fs.jr.abs(g))
			}
			return errno(err)
		}
		e.grave = g
		if !dstDir && dstSt.Nlink == 1 {
			e.ino = dstSt.Ino
		}
	}
	n.fs.jr.pending = append(n.fs.jr.pending, e)
	n.fs.commitImmediate()
	return 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	n.fs.hold("readdir", n.rel())
	ds, e := fs.NewLoopbackDirStream(n.abs())
	if e != 0 || !n.IsRoot() {
		return ds, e
	}
	return &hideGraves{DirStream: ds}, 0
}

// hideGraves leaves the graveyard out of the root's listing.
type hideGraves struct {
	fs.DirStream
	next *fuse.DirEntry
	err  syscall.Errno // from the stream, reported by the next Next
}

func (h *hideGraves) HasNext() bool {
	for h.next == nil && h.err == 0 && h.DirStream.HasNext() {
		de, e := h.DirStream.Next()
		if e != 0 {
			h.err = e
			break
		}
		if de.Name != graveDir {
			h.next = &de
		}
	}
	return h.next != nil || h.err != 0
}

func (h *hideGraves) Next() (fuse.DirEntry, syscall.Errno) {
	if !h.HasNext() {
		return fuse.DirEntry{}, syscall.ENOENT
	}
	if e := h.err; e != 0 {
		h.err = 0
		return fuse.DirEntry{}, e
	}
	de := *h.next
	h.next = nil
	return de, 0
}

// Fsync is fsync(2) and fdatasync(2), of a regular file (persist its
// pending state, whichever handle wrote it) or of a directory (commit the
// journal up to the last operation on it).
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	rel := n.rel()
	if n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
		n.fs.hold("fsyncdir", rel)
		if e := n.fs.faults.check(OpFsync, rel); e != 0 {
			return e
		}
		n.fs.ns.Lock()
		defer n.fs.ns.Unlock()
		if _, err := n.fs.jr.commitDir(rel); err != nil {
			n.fs.log.Warn("powerfs: commit", "dir", rel, "err", err)
			return syscall.EIO
		}
		return 0
	}
	e := n.fs.faults.check(OpFsync, rel)
	st, err := n.fs.acquire(n.StableAttr().Ino, nil)
	if err != nil {
		return errno(err)
	}
	if st == nil {
		return e // nothing pending
	}
	defer st.mu.Unlock()
	if e != 0 {
		if !n.fs.opts.KeepDataOnFailedSync {
			st.ov.fail()
		}
		return e
	}
	if err := n.fs.persist(st); err != nil {
		n.fs.log.Warn("powerfs: fsync", "path", rel, "err", err)
		return syscall.EIO
	}
	return 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var s syscall.Statfs_t
	if err := syscall.Statfs(n.fs.backing, &s); err != nil {
		return errno(err)
	}
	out.FromStatfsT(&s)
	return 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	t, err := os.Readlink(n.abs())
	if err != nil {
		return nil, errno(err)
	}
	return []byte(t), 0
}

// handle is an open regular file: a backing descriptor (read-write) and
// the inode whose pending state it reads and writes.
type handle struct {
	n   *node
	ino uint64
	f   *os.File
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

func (f *FS) newHandle(n *node, ino uint64, fd *os.File) *handle {
	h := &handle{n: n, ino: ino, f: fd}
	f.mu.Lock()
	f.handles[h] = struct{}{}
	f.open[ino]++
	f.mu.Unlock()
	return h
}

func (h *handle) dup() (*os.File, error) { return dupFile(h.f) }

func (h *handle) truncate(size int64) syscall.Errno {
	st, err := h.n.fs.acquire(h.ino, h.dup)
	if err != nil {
		return errno(err)
	}
	st.ov.truncate(size)
	st.mtime = time.Now()
	st.mu.Unlock()
	return 0
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	st, err := h.n.fs.acquire(h.ino, nil)
	if err != nil {
		return nil, errno(err)
	}
	if st == nil {
		n, err := readBacking(h.f, dest, off)
		if err != nil {
			return nil, errno(err)
		}
		return fuse.ReadResultData(dest[:n]), 0
	}
	defer st.mu.Unlock()
	n, err := st.ov.read(st.f, dest, off)
	if err != nil {
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if e := h.n.fs.faults.check(OpWrite, h.n.rel()); e != 0 {
		return 0, e
	}
	st, err := h.n.fs.acquire(h.ino, h.dup)
	if err != nil {
		return 0, errno(err)
	}
	defer st.mu.Unlock()
	if err := st.ov.write(st.f, data, off); err != nil {
		return 0, syscall.EIO
	}
	st.mtime = time.Now()
	return uint32(len(data)), 0
}

// Flush is close(2): it makes nothing durable.
func (h *handle) Flush(ctx context.Context) syscall.Errno { return 0 }

func (h *handle) Release(ctx context.Context) syscall.Errno {
	f := h.n.fs
	f.mu.Lock()
	_, live := f.handles[h]
	if live {
		delete(f.handles, h)
		if f.open[h.ino]--; f.open[h.ino] <= 0 {
			delete(f.open, h.ino)
		}
	}
	f.mu.Unlock()
	if live {
		h.f.Close()
	}
	return 0
}
