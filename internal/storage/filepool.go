package storage

import (
	"container/list"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
)

// DefaultMaxOpenFiles is the size of the process-wide FilePool that every Log
// uses unless Options.Files names another.
const DefaultMaxOpenFiles = 256

var defaultFilePool = NewFilePool(DefaultMaxOpenFiles)

// FilePool bounds the file descriptors held by closed segments (every
// segment but a log's active one): their .log and .index files are opened
// read-only on demand, kept in a least-recently-used list, and closed when
// more than max are open, to be reopened by the next read that needs them.
// The active segment's .log is pinned: held open (read-write) for as long as
// it is active, outside the list and the bound. So a process holds at most
// max descriptors for closed segments plus one per open Log, whatever the
// number of segments, plus briefly the files that reads were using when they
// were evicted (closed as soon as the last such read ends).
//
// One pool is shared by all the Logs of a process; it is safe for concurrent
// use. Lock order: Log.mu, then FilePool.mu.
type FilePool struct {
	max int

	mu        sync.Mutex // guards lru, stats, and f, refs, pinned, elem and gone of every poolFile
	lru       list.List  // of *poolFile: open, unpinned, most recently used first
	open      int        // descriptors held by unpinned files (in lru, or evicted while in use)
	reopens   int64
	evictions int64
}

// NewFilePool returns a pool that keeps at most n closed-segment files open
// (at least 1).
func NewFilePool(n int) *FilePool {
	return &FilePool{max: max(n, 1)}
}

// FilePoolStats is a snapshot of a FilePool.
type FilePoolStats struct {
	Max       int   // bound on open closed-segment files
	Open      int   // closed-segment files open now
	Reopens   int64 // files opened on demand since the pool was made
	Evictions int64 // files closed to stay within Max
}

// Stats returns the pool's current figures.
func (p *FilePool) Stats() FilePoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return FilePoolStats{Max: p.max, Open: p.open, Reopens: p.reopens, Evictions: p.evictions}
}

// poolFile is one file of a segment (its .log or its .index). A pinned file
// (the active segment's .log) keeps its descriptor; any other is opened on
// demand by acquire and may be closed by the pool whenever no read holds it.
type poolFile struct {
	pool *FilePool
	path string

	// Guarded by pool.mu. While pinned, f does not change, so the Log may
	// use it under its own lock without pool.mu (see w).
	f      *os.File
	id     os.FileInfo   // the file first opened, to recognise it when reopened
	refs   int           // acquires not yet released
	pinned bool          // held open outside the LRU list
	elem   *list.Element // in pool.lru: open, unpinned and not evicted
	gone   bool          // retired: never reopened
}

// pinned wraps the open, writable file of an active segment.
func (p *FilePool) pinned(path string, f *os.File) *poolFile {
	return &poolFile{pool: p, path: path, f: f, pinned: true}
}

// file returns a handle on a closed segment's file, opened on first use.
func (p *FilePool) file(path string) *poolFile {
	return &poolFile{pool: p, path: path}
}

func (pf *poolFile) isPinned() bool {
	pf.pool.mu.Lock()
	defer pf.pool.mu.Unlock()
	return pf.pinned
}

// w returns a pinned file's descriptor for writing. Only for the active
// segment, under Log.mu (the file stays pinned until Log.mu is held
// exclusively).
func (pf *poolFile) w() *os.File { return pf.f }

// acquire returns the open file, opening it if the pool closed it, and holds
// it open until release.
func (pf *poolFile) acquire() (*os.File, error) {
	p := pf.pool
	p.mu.Lock()
	if f, ok := pf.holdLocked(); ok || pf.gone {
		p.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("storage: %s: %w", pf.path, ErrClosed)
		}
		return f, nil
	}
	p.mu.Unlock()

	// Open outside the lock: on a network volume an open is a round trip.
	f, fi, err := openIdentified(pf.path)
	p.mu.Lock()
	if held, ok := pf.holdLocked(); ok || pf.gone { // another reader opened it meanwhile, or it was retired
		p.mu.Unlock()
		if f != nil {
			f.Close()
		}
		if !ok {
			return nil, fmt.Errorf("storage: %s: %w", pf.path, ErrClosed)
		}
		return held, nil
	}
	if err == nil && pf.id != nil && !os.SameFile(pf.id, fi) {
		f.Close()
		err = fmt.Errorf("storage: %s was replaced since this log opened it: %w", pf.path, ErrFenced)
	}
	if err != nil {
		known := pf.id != nil
		p.mu.Unlock()
		if known && errors.Is(err, fs.ErrNotExist) {
			// Files of a segment this log knows are removed only by a newer
			// leader or by the topic's deletion.
			return nil, fmt.Errorf("storage: %s was removed since this log opened it: %w (%w)", pf.path, ErrFenced, err)
		}
		return nil, err
	}
	if pf.id == nil {
		pf.id = fi
	}
	pf.f, pf.refs = f, 1
	pf.elem = p.lru.PushFront(pf)
	p.open++
	p.reopens++
	victims := p.evictLocked()
	p.mu.Unlock()
	closeAll(victims)
	return f, nil
}

// openIdentified opens path read-only and stats the open file.
func openIdentified(path string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("storage: stat %s: %w", path, err)
	}
	return f, fi, nil
}

// holdLocked takes a reference on an open file. Runs under pool.mu.
func (pf *poolFile) holdLocked() (*os.File, bool) {
	if pf.gone || pf.f == nil {
		return nil, false
	}
	pf.refs++
	if pf.elem != nil {
		pf.pool.lru.MoveToFront(pf.elem)
	}
	return pf.f, true
}

// release ends an acquire. A file evicted while it was in use is closed by
// its last release.
func (pf *poolFile) release() {
	p := pf.pool
	p.mu.Lock()
	pf.refs--
	f := pf.closableLocked()
	p.mu.Unlock()
	if f != nil {
		f.Close()
	}
}

// closableLocked detaches and returns the descriptor when nothing needs it
// any more: unused, unpinned and out of the LRU list. Runs under pool.mu.
func (pf *poolFile) closableLocked() *os.File {
	if pf.refs > 0 || pf.pinned || pf.elem != nil || pf.f == nil {
		return nil
	}
	f := pf.f
	pf.f = nil
	pf.pool.open--
	return f
}

// unpin turns the active segment's file into a closed segment's: it joins
// the LRU list (it is likely to be read soon) and may be evicted from then on.
func (pf *poolFile) unpin() {
	p := pf.pool
	fi, _ := pf.w().Stat() // identifies it when reopened; nil if unknown
	p.mu.Lock()
	if !pf.pinned || pf.gone {
		p.mu.Unlock()
		return
	}
	pf.pinned = false
	if pf.id == nil {
		pf.id = fi
	}
	pf.elem = p.lru.PushFront(pf)
	p.open++
	victims := p.evictLocked()
	p.mu.Unlock()
	closeAll(victims)
}

// retire drops the file for good (its segment was removed, or its Log
// closed): the descriptor is closed now, or by the last release of a read
// still using it.
func (pf *poolFile) retire() {
	p := pf.pool
	p.mu.Lock()
	if pf.gone {
		p.mu.Unlock()
		return
	}
	pf.gone = true
	if pf.elem != nil {
		p.lru.Remove(pf.elem)
		pf.elem = nil
	}
	if pf.pinned {
		// A pinned descriptor is not counted in p.open; from here on it is
		// an unpinned one (closed below, or by the release of an fsync
		// still using it).
		pf.pinned = false
		p.open++
	}
	f := pf.closableLocked()
	p.mu.Unlock()
	if f != nil {
		f.Close()
	}
}

// evictLocked removes the least recently used files beyond the bound and
// returns the descriptors no read is using, to be closed outside the lock
// (the others are closed by their last release). Runs under p.mu.
func (p *FilePool) evictLocked() []*os.File {
	var victims []*os.File
	for p.lru.Len() > p.max {
		e := p.lru.Back()
		pf := e.Value.(*poolFile)
		p.lru.Remove(e)
		pf.elem = nil
		p.evictions++
		if f := pf.closableLocked(); f != nil {
			victims = append(victims, f)
		}
	}
	return victims
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
