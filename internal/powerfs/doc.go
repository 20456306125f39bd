// Package powerfs is a FUSE file system for tests that can lose power, in
// the spirit of Jepsen's LazyFS. It serves a backing directory (the "disk")
// at a mount point and owns, in the test process, everything the page cache
// of a real machine would hold: data written and not yet fsynced, and
// namespace operations not yet made durable. Cut drops all of it at once,
// as a power cut does, and mounts the disk afresh.
//
// It imports no kaas package; kaas imports it only from test code
// (internal/powercut, and internal/proctest's StallingVolume). It is built on go-fuse v2's fs package and mounts
// with mount(2) directly (DirectMountStrict: no fusermount), so it needs
// root and /dev/fuse; Mount wraps ErrUnavailable when it cannot mount, and
// MountT mounts for a test, skips it then, and unmounts at its cleanup.
//
// # Model
//
// File data. Each regular file (by backing inode, so every handle and every
// hard link shares it) has an overlay of 4 KiB blocks written since its
// last persist, and the size readers see. Reads see the overlay over the
// backing file (read-your-writes, across handles and processes). write(2),
// ftruncate(2) and open with O_TRUNC change only the overlay. fsync(2) or
// fdatasync(2) of the file, through any handle, persists it: the dirty
// blocks and the size are written to the backing file. close(2) persists
// nothing. A cut drops every overlay: a file reads as it was at its last
// persist. Persisting writes whole blocks and nothing else, so a cut never
// tears within a block and never keeps a later write without an earlier
// one to the same file that was pending in another block; it keeps exactly
// what was fsynced.
//
// Namespace operations (create, mkdir, link, unlink, rmdir, rename) are
// applied to the backing directory when they are made, so the live view is
// the backing directory itself. With MetadataImmediate that is also when
// they become durable. With MetadataJournal (the default) they go into an
// ordered journal and become durable a prefix at a time, as in a journaling
// file system: an fsync of directory D commits every pending operation up
// to and including the last one that changed D (a rename changes both of
// its directories). An fsync of a file commits no namespace operation (POSIX
// does not promise that it makes the file's name durable; ext4 happens to,
// this model does not). A cut reverts the uncommitted suffix, newest first:
// a created file or directory disappears, an unlinked or renamed-over entry
// comes back from a hidden graveyard (".powerfs-graves" in the backing root,
// never shown in the mount), a rename is undone. So after
// create(tmp) write fsync(tmp) rename(tmp, f) without an fsync of the
// directory, a cut leaves f as it was before; with the directory fsync it
// leaves f with the fsynced data. A file created and renamed into place
// whose data was never fsynced comes back after a cut (once the directory
// was fsynced) with the data that was persisted: possibly none, an empty
// file under the final name.
//
// Attributes (mode, owner, times) are applied to the backing file at once
// and are not reverted by a cut; the size is file data (above).
//
// Not modelled: symlinks and device nodes cannot be created through the
// mount (ENOTSUP); RENAME_EXCHANGE; fallocate; xattrs; mmap (every file is
// opened FOPEN_DIRECT_IO, so the kernel caches no data and refuses shared
// mappings; kaas reads and writes with pread/pwrite and fsync only). The
// kernel caches no entries or attributes either (timeouts 0), so every
// lookup and stat comes here.
//
// # Faults
//
// Inject arms a Fault: the next Count (or every) write, fsync, rename or
// create whose path matches a regular expression fails with an errno (EIO
// by default, or ENOSPC, ...), before it changes anything. A failed fsync
// of a file loses that file's pending blocks as Linux does after a
// writeback error: they stay readable until the cut but are never
// persisted unless written again, and a later fsync that succeeds does not
// bring them back (Options.KeepDataOnFailedSync keeps them pending
// instead). A failed fsync of a directory commits nothing.
//
// # Cut
//
// Cut unmounts (a mount still busy is aborted through fusectl and
// detached: processes holding files in it see ENOTCONN), drops every
// overlay, reverts the journal, and mounts a fresh server on the same mount
// point, so no kernel or go-fuse state survives the cut either. Kill the
// processes using the mount first (a power cut stops them too).
//
// # Several mounts of one disk
//
// Several FS may serve one backing directory at different mount points,
// one per process, as the clients of a network file system: a write is
// seen through another mount once it is fsynced (until then it is only in
// the writing mount's overlay), namespace operations at once. Mount them
// all before any is used (each Mount clears the shared graveyard), never
// Cut one, and use MetadataImmediate. Options.Hold then models a server
// that holds one client's request while it conflicts with another's.
//
// # Concurrency
//
// FUSE requests run on go-fuse's goroutines. FS.ns serialises namespace
// operations and guards the journal; FS.mu guards the table of file states
// and open handles; each file state has its own lock for its overlay. Cut
// and Close hold FS.srvMu and run with the server stopped.
package powerfs
