package offsets

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kaas-dev/kaas/internal/fsutil"
)

// refresh makes the in-memory state equal to the file: it loads the group on
// first touch, and otherwise re-reads the file only when its identity (inode,
// size, mtime) differs from the one last read or written.
func (s *Store) refresh(g *groupState) error {
	if !g.loaded {
		return s.load(g)
	}
	fi, err := s.fs.Stat(g.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !g.fi.IsSet() {
			return nil
		}
		s.log.Info("offsets: group file removed by another writer", "group", g.id)
		g.setEmpty()
		return nil
	case err != nil:
		return fmt.Errorf("offsets: stat %q: %w", g.id, err)
	case g.fi.Same(fi):
		return nil
	}
	s.log.Info("offsets: group file changed by another writer, reloading", "group", g.id)
	kept := g.keep()
	if err := s.load(g); err != nil {
		return err
	}
	if !g.fence.Less(kept.fence) {
		return nil
	}
	// The file was written under an older assignment than the state held
	// here: a former coordinator's write, held by the volume, landed after
	// this broker's. The brokers gaining a group wait for the writes in
	// flight of the brokers losing it, but not of one declared dead
	// (killed, frozen, cut off), and such a broker did not acknowledge it
	// (regrant). The newer state is written back.
	s.log.Warn("offsets: group file replaced by a former coordinator's late write; writing this broker's newer state back",
		"group", g.id, "file_epoch", g.fence.ControllerEpoch, "file_version", g.fence.AssignmentVersion,
		"epoch", kept.fence.ControllerEpoch, "version", kept.fence.AssignmentVersion)
	read := g.fi
	kept.restore(g)
	end := s.flights.Begin(g.fence.stamp())
	_, err = s.writeFile(g, func() error {
		fi, err := s.fs.Stat(g.path)
		if err == nil && !read.Same(fi) {
			err = errRaced
		}
		return err
	}, nil)
	end()
	if err != nil {
		g.loaded, g.st = false, state{} // the next touch reads the file again
		return fmt.Errorf("offsets: write %q back: %w", g.id, err)
	}
	return nil
}

// setEmpty makes the group's memory that of a group with no file: loaded,
// nothing committed, staged or recorded.
func (g *groupState) setEmpty() {
	g.st, g.fence, g.onDisk, g.fi, g.loaded, g.txns, g.info, g.unstamped = state{}, Fence{}, false, fsutil.Version{}, true, nil, Retention{}, false
	g.members = nil
}

// kept is a group's in-memory state, set aside while the file is read.
type kept struct {
	st        state
	fence     Fence
	txns      map[int64]Staged
	info      Retention
	members   *Membership
	unstamped bool
}

func (g *groupState) keep() kept {
	return kept{g.st, g.fence, g.txns, g.info, g.members, g.unstamped}
}

func (k kept) restore(g *groupState) {
	g.st, g.fence, g.txns, g.info, g.members, g.unstamped = k.st, k.fence, k.txns, k.info, k.members, k.unstamped
}

// load reads the group's file into memory (an absent file is an empty group).
func (s *Store) load(g *groupState) error {
	data, fi, err := s.fs.ReadFile(g.path)
	if errors.Is(err, fs.ErrNotExist) {
		g.setEmpty()
		return nil
	}
	if err != nil {
		return fmt.Errorf("offsets: read %q: %w", g.id, err)
	}
	d, err := decodeFile(data)
	if err != nil {
		s.reportCorrupt(g.id, fsutil.VersionOf(fi), err)
		return fmt.Errorf("offsets: decode %q: %w: %w", g.id, ErrCorrupt, err)
	}
	g.st, g.fence, g.onDisk, g.fi, g.loaded, g.txns, g.info = d.st, d.fence, true, fsutil.VersionOf(fi), true, d.txns, d.info
	g.members = d.members
	if d.membersErr != nil {
		// The offsets stay; the group starts without its membership (its
		// members rejoin), and the next write drops the damaged section.
		s.log.Warn("offsets: membership section of the group file ignored", "group", g.id, "err", d.membersErr)
	}
	g.unstamped = stampMissing(&g.st, g.txns, s.now().UnixMilli())
	return nil
}

// reportCorrupt logs a group file that cannot be decoded, and counts it,
// once per version of the file: every request of the group fails until
// DeleteGroups moves it aside, and would otherwise log it again.
func (s *Store) reportCorrupt(group string, v fsutil.Version, err error) {
	s.mu.Lock()
	seen, ok := s.corrupt[group]
	if ok && seen == v {
		s.mu.Unlock()
		return
	}
	s.corrupt[group] = v
	s.mu.Unlock()
	s.log.Error("offsets: group file cannot be decoded; the group answers COORDINATOR_NOT_AVAILABLE until DeleteGroups moves the file aside (docs/operations.md, \"A damaged group file\")",
		"group", group, "err", err)
	if s.onCorrupt != nil {
		s.onCorrupt(group)
	}
}

// SetAside moves the group's file aside as <file>.corrupt-<UTC time>, bytes
// kept, when it cannot be decoded, so that the group starts over empty
// (DeleteGroups of a damaged group). own is granted as for a write, and
// again just before the rename. It returns the new name, or "" when there
// was nothing to move: no file, or a file that decodes now.
func (s *Store) SetAside(group string, own Owner) (string, error) {
	if err := validGroup(group); err != nil {
		return "", err
	}
	for {
		g, err := s.handle(group)
		if err != nil {
			return "", err
		}
		g.mu.Lock()
		if g.evicted {
			g.mu.Unlock()
			continue
		}
		name, err := s.setAside(g, own)
		g.mu.Unlock()
		return name, err
	}
}

// setAside is SetAside with g.mu held.
func (s *Store) setAside(g *groupState, own Owner) (string, error) {
	first, err := grant(own)
	if err != nil {
		s.forget(g, false)
		return "", err
	}
	data, _, err := s.fs.ReadFile(g.path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("offsets: read %q: %w", g.id, err)
	}
	if _, err := decodeFile(data); err == nil {
		return "", nil
	}
	end := s.flights.Begin(first.stamp())
	defer end()
	if _, err := grant(own); err != nil {
		return "", err
	}
	aside := g.path + ".corrupt-" + s.now().UTC().Format("20060102T150405.000Z")
	if err := s.fs.Rename(g.path, aside); err != nil {
		return "", fmt.Errorf("offsets: move %q aside: %w", g.id, err)
	}
	if !s.noSync {
		if err := s.dirf.Sync(); err != nil {
			return "", fmt.Errorf("offsets: move %q aside: sync dir: %w", g.id, err)
		}
	}
	g.setEmpty()
	s.mu.Lock()
	delete(s.corrupt, g.id)
	s.mu.Unlock()
	s.log.Warn("offsets: damaged group file moved aside; the group starts over", "group", g.id, "file", filepath.Base(aside))
	return filepath.Base(aside), nil
}

var bufPool = sync.Pool{New: func() any { return new([]byte) }}

// writeFile writes the group's state with the durable pattern: a temp file with
// a name unique to this Store and write, fsync, rename over the group file,
// fsync the directory. recheck runs just before the rename, after (nil:
// none) once the directory is synced; an error of either fails the write.
// renamed reports whether the rename happened.
func (s *Store) writeFile(g *groupState, recheck, after func() error) (renamed bool, err error) {
	bp := bufPool.Get().(*[]byte)
	data := encodeFile((*bp)[:0], g.id, &g.st, g.fence, g.info, g.members, g.txns)
	defer func() {
		*bp = data
		bufPool.Put(bp)
	}()
	tmp := filepath.Join(s.dir, s.tmpBase+fmt.Sprint(s.tmpSeq.Add(1)))
	f, err := s.fs.CreateExcl(tmp)
	if err != nil {
		return false, fmt.Errorf("offsets: write %q: %w", g.id, err)
	}
	fi, err := writeSync(f, data, s.noSync)
	if err != nil {
		s.fs.Remove(tmp)
		return false, fmt.Errorf("offsets: write %q: %w", g.id, err)
	}
	if err := recheck(); err != nil {
		s.fs.Remove(tmp)
		return false, err
	}
	if err := s.fs.Rename(tmp, g.path); err != nil {
		s.fs.Remove(tmp)
		return false, fmt.Errorf("offsets: write %q: rename: %w", g.id, err)
	}
	if !s.noSync {
		if err := s.dirf.Sync(); err != nil {
			return true, fmt.Errorf("offsets: write %q: sync dir: %w", g.id, err)
		}
	}
	if after != nil {
		if err := after(); err != nil {
			return true, err
		}
	}
	g.fi, g.onDisk = fsutil.VersionOf(fi), true
	return true, nil
}

func writeSync(f writeFile, data []byte, noSync bool) (fs.FileInfo, error) {
	_, err := f.Write(data)
	if err == nil && !noSync {
		err = f.Sync()
	}
	var fi fs.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return fi, err
}

// removeFile removes the group's file durably; after is as for writeFile.
func (s *Store) removeFile(g *groupState, after func() error) (removed bool, err error) {
	err = s.fs.Remove(g.path)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	} else if err != nil {
		return false, fmt.Errorf("offsets: delete %q: %w", g.id, err)
	}
	if !s.noSync {
		if err := s.dirf.Sync(); err != nil {
			return true, fmt.Errorf("offsets: delete %q: sync dir: %w", g.id, err)
		}
	}
	if after != nil {
		if err := after(); err != nil {
			return true, err
		}
	}
	g.fi, g.onDisk = fsutil.Version{}, false
	return true, nil
}

// CleanTemp removes temp files (names starting with ".tmp-") older than age,
// left behind by crashed writers of any broker. It reads the directory; run it in
// the background, not at startup. It returns how many it removed.
func (s *Store) CleanTemp(ctx context.Context, age time.Duration) (int, error) {
	entries, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return 0, fmt.Errorf("offsets: read %s: %w", s.dir, err)
	}
	n := 0
	cutoff := time.Now().Add(-age)
	for _, de := range entries {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		if !strings.HasPrefix(de.Name(), tempPrefix) {
			continue
		}
		fi, err := de.Info()
		if err != nil || fi.ModTime().After(cutoff) {
			continue
		}
		if s.fs.Remove(filepath.Join(s.dir, de.Name())) == nil {
			n++
		}
	}
	return n, nil
}
