package powerfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// ErrUnavailable wraps every reason FUSE cannot be mounted here (no
// /dev/fuse, no privilege, no kernel support, a mount that never answers).
// Tests skip on it.
var ErrUnavailable = errors.New("powerfs: FUSE cannot be mounted here")

// MetadataMode says when namespace operations (create, mkdir, link,
// unlink, rmdir, rename) become durable.
type MetadataMode uint8

const (
	// MetadataJournal: namespace operations are applied to the backing
	// directory at once but become durable only in order, a prefix at a
	// time: an fsync of directory D makes every operation up to and
	// including the last one that changed D durable. A cut reverts the
	// rest. The default.
	MetadataJournal MetadataMode = iota
	// MetadataImmediate: every namespace operation is durable when it
	// returns (a file system with synchronous metadata).
	MetadataImmediate
)

func (m MetadataMode) String() string {
	switch m {
	case MetadataJournal:
		return "journal"
	case MetadataImmediate:
		return "immediate"
	}
	return "MetadataMode(" + strconv.Itoa(int(m)) + ")"
}

// Options shape a mount. The zero value is the strict model.
type Options struct {
	Metadata MetadataMode
	// KeepDataOnFailedSync makes a failed fsync (an injected fault) keep
	// the pending writes pending, so that a later fsync may still persist
	// them. By default they are lost as on Linux: still readable until the
	// cut, never persisted unless written again.
	KeepDataOnFailedSync bool
	// SyncBacking makes every persist also fsync the backing file, for a
	// backing directory that must survive a crash of the host itself.
	SyncBacking bool
	// MountTimeout bounds mounting (and every remount); default 10s.
	MountTimeout time.Duration
	// Logger receives one line per mount, cut and unmount; default: none.
	Logger *slog.Logger
	// Hold, when set, is called at the start of every namespace operation
	// (lookup, readdir, create, mkdir, link, unlink, rmdir, rename) and
	// every directory fsync, before any lock is taken, with the operation's
	// name and the paths it touches (relative to the mount root,
	// "/"-separated). It may block: so a test models a network file system
	// whose server holds a request that conflicts with another client's
	// cached state (CephFS's MDS holds it until its next tick). Several
	// mounts of one backing directory, one per process, model one client
	// per process. File reads, writes and fsyncs are never held.
	Hold func(op string, paths ...string)
	// Cache lets the kernel cache names and attributes, as a network file
	// system client does (NFS: actimeo, lookupcache): zero values (the
	// default) cache nothing. With several mounts of one backing
	// directory, a mount then shows another mount's renames, creates and
	// size changes to stat and lookup up to that long late; opens and
	// reads still reach the file by its path (close-to-open for data).
	Cache Cache
}

// Cache is how long the kernel may trust what a mount told it.
type Cache struct {
	Entry    time.Duration // a name's lookup (NFS: the folder's acdirmin/acdirmax)
	Attr     time.Duration // a file's attributes (NFS: acregmin/acregmax)
	Negative time.Duration // a failed lookup (NFS: lookupcache=all; 0 is lookupcache=positive)
}

// Loss is what a cut drops (or, from Pending, would drop now).
type Loss struct {
	Files int   // files with pending data or a pending size change
	Bytes int64 // pending bytes, in whole 4 KiB blocks
	Ops   int   // namespace operations not yet durable
}

// FS is a mounted power-cut file system. Its methods are safe for
// concurrent use; Cut and Close must not overlap each other.
type FS struct {
	backing string // absolute backing directory: the disk
	mnt     string // absolute mount point
	opts    Options
	log     *slog.Logger

	srvMu   sync.Mutex // guards server; held across Cut and Close
	server  *fuse.Server
	rootIno uint64

	// ns serialises namespace operations and guards jr. Lock order: ns
	// before mu and before a fileState's mu; a fileState's mu before mu
	// (acquire releases mu before it locks the state).
	ns sync.Mutex
	jr journal

	mu      sync.Mutex // guards files, handles, open
	files   map[uint64]*fileState
	handles map[*handle]struct{}
	open    map[uint64]int // open handles per inode

	faults faultSet
}

// fileState is the pending state of one inode (by backing inode number):
// it exists from the first write or truncate until a persist leaves it
// clean, and is dropped whole by a cut.
type fileState struct {
	mu    sync.Mutex // guards the fields below
	ino   uint64
	f     *os.File // own O_RDWR descriptor of the backing inode
	ov    *overlay
	mtime time.Time
	dead  bool // removed from FS.files: look it up again
}

// Mount serves backingDir at mountpoint (both must exist). A failure to
// mount FUSE at all wraps ErrUnavailable.
func Mount(backingDir, mountpoint string, o Options) (*FS, error) {
	if o.MountTimeout <= 0 {
		o.MountTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	back, err := filepath.Abs(backingDir)
	if err != nil {
		return nil, fmt.Errorf("powerfs: backing dir %s: %w", backingDir, err)
	}
	mnt, err := filepath.Abs(mountpoint)
	if err != nil {
		return nil, fmt.Errorf("powerfs: mount point %s: %w", mountpoint, err)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(back, &st); err != nil {
		return nil, fmt.Errorf("powerfs: backing dir %s: %w", back, err)
	}
	// Graves left by an earlier process are dead: that process's pending
	// removals were never undone, so they count as durable.
	graves := filepath.Join(back, graveDir)
	if err := os.RemoveAll(graves); err != nil {
		return nil, fmt.Errorf("powerfs: clear %s: %w", graves, err)
	}
	if err := os.Mkdir(graves, 0o700); err != nil {
		return nil, fmt.Errorf("powerfs: create %s: %w", graves, err)
	}
	f := &FS{
		backing: back, mnt: mnt, opts: o, log: o.Logger, rootIno: st.Ino,
		files: map[uint64]*fileState{}, handles: map[*handle]struct{}{}, open: map[uint64]int{},
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	f.jr = journal{root: back, mount: hex.EncodeToString(id[:]), deleted: f.inodeDeleted}
	if err := f.mount(); err != nil {
		return nil, err
	}
	f.log.Info("powerfs: mounted", "backing", back, "mount", mnt, "metadata", o.Metadata)
	return f, nil
}

// Dir is the mount point.
func (f *FS) Dir() string { return f.mnt }

// Backing is the backing directory: what a cut leaves.
func (f *FS) Backing() string { return f.backing }

// mount starts a fresh server (fresh kernel and go-fuse state) on mnt.
// Called with srvMu held (or before f is shared).
func (f *FS) mount() error {
	entry, attr, negative := f.opts.Cache.Entry, f.opts.Cache.Attr, f.opts.Cache.Negative
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMountStrict:  true,
			FsName:             "powerfs:" + f.backing,
			Name:               "powerfs",
			DisableXAttrs:      true,
			DisableReadDirPlus: true,
			MaxWrite:           1 << 20,
			DisableSplice:      true, // reads answer from memory, never from a descriptor
		},
		// By default nothing is cached by the kernel: every lookup,
		// attribute and (with FOPEN_DIRECT_IO, always) every read and
		// write comes here.
		EntryTimeout:    &entry,
		AttrTimeout:     &attr,
		NegativeTimeout: &negative,
		RootStableAttr:  &fs.StableAttr{Ino: f.rootIno},
	}
	type result struct {
		srv *fuse.Server
		err error
	}
	ch := make(chan result, 1)
	go func() {
		srv, err := fs.Mount(f.mnt, &node{fs: f}, opts)
		ch <- result{srv, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			var errno syscall.Errno
			if errors.As(r.err, &errno) && (errno == syscall.EPERM || errno == syscall.EACCES ||
				errno == syscall.ENODEV || errno == syscall.ENOENT || errno == syscall.ENXIO ||
				errno == syscall.ENOSYS) {
				return fmt.Errorf("%w: mount %s: %v", ErrUnavailable, f.mnt, r.err)
			}
			return fmt.Errorf("powerfs: mount %s: %w", f.mnt, r.err)
		}
		f.server = r.srv
		return nil
	case <-time.After(f.opts.MountTimeout):
		go func() {
			// Unmount it should it come up after all.
			if r := <-ch; r.srv != nil {
				_ = r.srv.Unmount()
			}
		}()
		return fmt.Errorf("%w: mount %s did not answer within %v", ErrUnavailable, f.mnt, f.opts.MountTimeout)
	}
}

// unmount stops the server; afterwards no request is in flight. A mount
// kept busy (a process still holding a file open) is aborted and detached:
// to that process the power went off too. Called with srvMu held.
func (f *FS) unmount() error {
	srv := f.server
	if srv == nil {
		return nil
	}
	f.server = nil
	var dev uint64
	var st syscall.Stat_t
	if err := syscall.Stat(f.mnt, &st); err == nil {
		dev = st.Dev
	}
	done := make(chan error, 1)
	go func() { done <- srv.Unmount() }()
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		f.log.Warn("powerfs: unmount failed, aborting the connection", "mount", f.mnt, "err", err)
	case <-time.After(5 * time.Second):
		f.log.Warn("powerfs: unmount did not finish within 5s, aborting the connection", "mount", f.mnt)
	}
	if err := abortConnection(dev); err != nil {
		f.log.Warn("powerfs: abort the FUSE connection", "mount", f.mnt, "err", err)
	}
	if err := syscall.Unmount(f.mnt, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		f.log.Warn("powerfs: lazy unmount", "mount", f.mnt, "err", err)
	}
	waited := make(chan struct{})
	go func() { srv.Wait(); close(waited) }()
	select {
	case <-waited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("powerfs: unmount %s: the server did not stop", f.mnt)
	}
}

// abortConnection writes to the connection's abort file in fusectl,
// mounting fusectl first when it is not.
func abortConnection(dev uint64) error {
	if dev == 0 {
		return errors.New("no device number")
	}
	const ctl = "/sys/fs/fuse/connections"
	abort := filepath.Join(ctl, strconv.FormatUint(dev, 10), "abort")
	if _, err := os.Stat(abort); err != nil {
		if err := syscall.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil && !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("mount fusectl: %w", err)
		}
	}
	return os.WriteFile(abort, []byte("1"), 0o200)
}

// Cut is the power going off and coming back: the mount goes away
// (processes still holding files in it see ENOTCONN), every pending write
// and size change of every file is dropped, every namespace operation not
// yet durable is reverted, and the backing directory is mounted afresh.
// Armed faults stay armed. Kill the processes using the mount first.
func (f *FS) Cut() (Loss, error) {
	f.srvMu.Lock()
	defer f.srvMu.Unlock()
	if err := f.unmount(); err != nil {
		return Loss{}, err
	}
	loss, err := f.crash()
	if err != nil {
		return loss, err
	}
	if err := f.mount(); err != nil {
		return loss, fmt.Errorf("powerfs: remount after the cut: %w", err)
	}
	f.log.Info("powerfs: cut", "mount", f.mnt, "files", loss.Files, "bytes", loss.Bytes, "ops", loss.Ops)
	return loss, nil
}

// crash drops every pending state and reverts the journal. The server is
// stopped: nothing else runs.
func (f *FS) crash() (Loss, error) {
	var loss Loss
	f.mu.Lock()
	files, handles := f.files, f.handles
	f.files, f.handles, f.open = map[uint64]*fileState{}, map[*handle]struct{}{}, map[uint64]int{}
	f.mu.Unlock()
	for _, st := range files {
		st.mu.Lock()
		if !st.dead {
			if p := st.ov.pending(); p > 0 {
				loss.Files++
				loss.Bytes += p
			}
			st.dead = true
			st.f.Close()
		}
		st.mu.Unlock()
	}
	for h := range handles {
		h.f.Close()
	}
	f.ns.Lock()
	defer f.ns.Unlock()
	n, err := f.jr.undo()
	loss.Ops = n
	if err != nil {
		return loss, err
	}
	// Nothing is pending any more: what remains in the graveyard is dead.
	graves := filepath.Join(f.backing, graveDir)
	if err := os.RemoveAll(graves); err != nil {
		return loss, fmt.Errorf("powerfs: clear %s: %w", graves, err)
	}
	if err := os.Mkdir(graves, 0o700); err != nil {
		return loss, fmt.Errorf("powerfs: create %s: %w", graves, err)
	}
	return loss, nil
}

// Pending is what a cut would drop now.
func (f *FS) Pending() Loss {
	var loss Loss
	for _, st := range f.states() {
		st.mu.Lock()
		if !st.dead {
			if p := st.ov.pending(); p > 0 {
				loss.Files++
				loss.Bytes += p
			}
		}
		st.mu.Unlock()
	}
	f.ns.Lock()
	loss.Ops = len(f.jr.pending)
	f.ns.Unlock()
	return loss
}

// Sync makes everything durable, as sync(2) does: every file's pending
// data and every namespace operation.
func (f *FS) Sync() error {
	var errs []error
	for _, st := range f.states() {
		st.mu.Lock()
		if !st.dead {
			if err := f.persist(st); err != nil {
				errs = append(errs, err)
			}
		}
		st.mu.Unlock()
	}
	f.ns.Lock()
	_, err := f.jr.commitAll()
	f.ns.Unlock()
	return errors.Join(append(errs, err)...)
}

// Close unmounts. What is still pending is dropped as by a cut; call Sync
// first for a clean shutdown.
func (f *FS) Close() error {
	f.srvMu.Lock()
	defer f.srvMu.Unlock()
	if f.server == nil {
		return nil
	}
	err := f.unmount()
	if _, cerr := f.crash(); err == nil {
		err = cerr
	}
	f.log.Info("powerfs: unmounted", "mount", f.mnt)
	return err
}

// Inject arms a fault.
func (f *FS) Inject(ft Fault) error { return f.faults.add(ft) }

// ClearFaults disarms every fault.
func (f *FS) ClearFaults() { f.faults.clear() }

// Failed counts the calls that failed by an injected fault, per Op.
func (f *FS) Failed() map[Op]int { return f.faults.counts() }

func (f *FS) states() []*fileState {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*fileState, 0, len(f.files))
	for _, st := range f.files {
		out = append(out, st)
	}
	return out
}

// acquire returns the state of ino, locked. When there is none it creates
// one with a descriptor from open, or returns nil when open is nil.
func (f *FS) acquire(ino uint64, open func() (*os.File, error)) (*fileState, error) {
	for {
		f.mu.Lock()
		st := f.files[ino]
		if st == nil {
			if open == nil {
				f.mu.Unlock()
				return nil, nil
			}
			fd, err := open()
			if err != nil {
				f.mu.Unlock()
				return nil, err
			}
			fi, err := fd.Stat()
			if err != nil {
				fd.Close()
				f.mu.Unlock()
				return nil, err
			}
			st = &fileState{ino: ino, f: fd, ov: newOverlay(fi.Size()), mtime: fi.ModTime()}
			f.files[ino] = st
		}
		f.mu.Unlock()
		st.mu.Lock()
		if !st.dead {
			return st, nil
		}
		st.mu.Unlock()
	}
}

// persist makes st's pending data durable and drops st when nothing is
// left in it. Called with st.mu held.
func (f *FS) persist(st *fileState) error {
	if err := st.ov.persist(st.f); err != nil {
		return fmt.Errorf("powerfs: persist inode %d: %w", st.ino, err)
	}
	if f.opts.SyncBacking {
		if err := st.f.Sync(); err != nil {
			return fmt.Errorf("powerfs: fsync backing inode %d: %w", st.ino, err)
		}
	}
	if st.ov.clean() {
		f.drop(st)
	}
	return nil
}

// drop removes st from the table. Called with st.mu held.
func (f *FS) drop(st *fileState) {
	f.mu.Lock()
	if f.files[st.ino] == st {
		delete(f.files, st.ino)
	}
	f.mu.Unlock()
	st.dead = true
	st.f.Close()
}

// forget drops whatever state inode ino has: a file was just created with
// that number, so any state left for it belongs to a dead file.
func (f *FS) forget(ino uint64) {
	f.mu.Lock()
	st := f.files[ino]
	delete(f.files, ino)
	f.mu.Unlock()
	if st != nil {
		st.mu.Lock()
		if !st.dead {
			st.dead = true
			st.f.Close()
		}
		st.mu.Unlock()
	}
}

// inodeDeleted is told when a file's last name is deleted for good: its
// pending state goes unless a handle still has the file open.
func (f *FS) inodeDeleted(ino uint64) {
	f.mu.Lock()
	busy := f.open[ino] > 0
	f.mu.Unlock()
	if !busy {
		f.forget(ino)
	}
}

// commitImmediate makes the journal durable at once in MetadataImmediate
// mode. Called with ns held.
func (f *FS) commitImmediate() {
	if f.opts.Metadata != MetadataImmediate {
		return
	}
	if _, err := f.jr.commitAll(); err != nil {
		f.log.Warn("powerfs: commit", "err", err)
	}
}

// dupFile duplicates a descriptor (close-on-exec: the test process starts
// brokers, which must not inherit it).
func dupFile(src *os.File) (*os.File, error) {
	sc, err := src.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var derr error
	if err := sc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(nfd), src.Name()), nil
}

// readBacking reads from a backing descriptor, treating EOF as a short read.
func readBacking(fd *os.File, p []byte, off int64) (int, error) {
	n, err := fd.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}
