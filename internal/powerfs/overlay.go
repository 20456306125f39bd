package powerfs

import (
	"errors"
	"fmt"
	"io"
)

// blockSize is the page size of the overlay: the unit in which pending data
// is kept, persisted and (after a failed fsync) lost.
const blockSize = 4096

// backing is the durable copy of one file: what survives a cut. *os.File
// satisfies it; tests use an in-memory twin.
type backing interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Truncate(size int64) error
}

// overlay is the page cache of one file: every block written (or zeroed by a
// truncate) since the file was last persisted, and the size readers see. The
// backing holds exactly what was persisted.
//
// Invariants: minSize ≤ size; no block lies wholly at or past size; bytes at
// or past size inside a block are zero. A byte at offset o < size reads from
// its block when the block is present, else from the backing when
// o < minSize, else as zero (the backing's bytes there were truncated away
// and are stale).
//
// Not safe for concurrent use: the owning fileState's lock guards it.
type overlay struct {
	size    int64            // the size readers see
	minSize int64            // the smallest size since the last persist
	disk    int64            // the backing's size (as last persisted)
	blocks  map[int64]*block // by block index
}

// block is one page of the overlay.
type block struct {
	data [blockSize]byte
	// dirty: written since the last persist. A block that is present but not
	// dirty was lost by a failed fsync: it stays readable until the cut but
	// is never persisted unless written again (Linux marks such pages clean).
	dirty bool
}

// newOverlay starts the overlay of a file whose backing is size bytes long.
func newOverlay(size int64) *overlay {
	return &overlay{size: size, minSize: size, disk: size, blocks: map[int64]*block{}}
}

// clean reports whether the overlay holds nothing the backing lacks, so that
// reads may go to the backing directly.
func (o *overlay) clean() bool {
	return len(o.blocks) == 0 && o.minSize == o.size && o.disk == o.size
}

// pending is how many bytes a cut would drop now (dirty blocks only).
func (o *overlay) pending() int64 {
	var n int64
	for _, b := range o.blocks {
		if b.dirty {
			n += blockSize
		}
	}
	if o.size != o.disk && n == 0 {
		n = 1 // a size change alone is pending too
	}
	return n
}

// fromBacking fills p (the bytes at off) as the backing contributes them:
// backing bytes below minSize, zeros from there on.
func (o *overlay) fromBacking(b backing, p []byte, off int64) error {
	clear(p)
	n := int64(len(p))
	if off >= o.minSize {
		return nil
	}
	n = min(n, o.minSize-off)
	_, err := b.ReadAt(p[:n], off)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read backing at %d: %w", off, err)
	}
	return nil
}

// load returns block i, creating it from the backing when absent.
func (o *overlay) load(b backing, i int64) (*block, error) {
	if blk := o.blocks[i]; blk != nil {
		return blk, nil
	}
	blk := &block{}
	if err := o.fromBacking(b, blk.data[:], i*blockSize); err != nil {
		return nil, err
	}
	// Bytes at or past size read as zero whatever the backing holds.
	if end := o.size - i*blockSize; end < blockSize {
		clear(blk.data[max(end, 0):])
	}
	o.blocks[i] = blk
	return blk, nil
}

// read copies the bytes at off into p and returns how many there are (fewer
// than len(p) at the end of the file).
func (o *overlay) read(b backing, p []byte, off int64) (int, error) {
	if off >= o.size {
		return 0, nil
	}
	p = p[:min(int64(len(p)), o.size-off)]
	for done := 0; done < len(p); {
		pos := off + int64(done)
		i, in := pos/blockSize, pos%blockSize
		n := min(len(p)-done, int(blockSize-in))
		if blk := o.blocks[i]; blk != nil {
			copy(p[done:done+n], blk.data[in:])
		} else if err := o.fromBacking(b, p[done:done+n], pos); err != nil {
			return done, err
		}
		done += n
	}
	return len(p), nil
}

// write applies p at off and extends the size past it.
func (o *overlay) write(b backing, p []byte, off int64) error {
	for done := 0; done < len(p); {
		pos := off + int64(done)
		i, in := pos/blockSize, pos%blockSize
		n := min(len(p)-done, int(blockSize-in))
		blk, err := o.load(b, i)
		if err != nil {
			return err
		}
		copy(blk.data[in:], p[done:done+n])
		blk.dirty = true
		done += n
		o.size = max(o.size, pos+int64(n))
	}
	return nil
}

// truncate sets the size, as ftruncate does: bytes past it are gone, and
// bytes between the old and a larger new size read as zero.
func (o *overlay) truncate(size int64) {
	if size < o.size {
		for i, blk := range o.blocks {
			start := i * blockSize
			switch {
			case start >= size:
				delete(o.blocks, i)
			case start+blockSize > size:
				clear(blk.data[size-start:])
				blk.dirty = true
			}
		}
		o.minSize = min(o.minSize, size)
	}
	o.size = size
}

// persist writes every dirty block and the size to the backing: what an
// fsync makes durable. Lost blocks are left as they are.
func (o *overlay) persist(b backing) error {
	if o.minSize < o.disk {
		if err := b.Truncate(o.minSize); err != nil {
			return fmt.Errorf("truncate backing to %d: %w", o.minSize, err)
		}
	}
	for i, blk := range o.blocks {
		if !blk.dirty {
			continue
		}
		start := i * blockSize
		n := min(int64(blockSize), o.size-start)
		if _, err := b.WriteAt(blk.data[:n], start); err != nil {
			return fmt.Errorf("write backing at %d: %w", start, err)
		}
	}
	if err := b.Truncate(o.size); err != nil {
		return fmt.Errorf("truncate backing to %d: %w", o.size, err)
	}
	for i, blk := range o.blocks {
		if blk.dirty {
			delete(o.blocks, i)
		}
	}
	o.minSize, o.disk = o.size, o.size
	return nil
}

// fail is a failed fsync: the dirty blocks are lost (readable until the
// cut, never persisted unless written again).
func (o *overlay) fail() {
	for _, blk := range o.blocks {
		blk.dirty = false
	}
}
