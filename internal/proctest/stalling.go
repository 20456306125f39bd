package proctest

import (
	"fmt"
	"path"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/powerfs"
)

// StallingVolume mounts one new backing folder n times with powerfs, one
// mount per broker (Options.DataDirs), as n clients of a network file
// system whose server holds a request that conflicts with another client's
// recent use until its next tick: CephFS's MDS holds a rename, a lookup or
// a listing that needs capabilities another client holds until it flushes
// its journal, at least every mds_tick_interval (docs/volume.md, "Stalls").
// The model, on one clock for all mounts, ticks every tick; within a tick:
//
//   - a lookup of a name is held until the next tick when another mount
//     changed that name (created, linked, renamed, unlinked it);
//   - a listing of a folder is held when another mount changed a name in it;
//   - a change of a name is held when another mount looked it up or
//     changed it, or listed its folder;
//   - an fsync of a folder is held when another mount listed it;
//   - then the call proceeds, and counts as this mount's use in the tick
//     it proceeds in; the rest of that tick, nothing of this mount is
//     held (the flush at the tick answers every call that waited on it,
//     and the client holds the capabilities it was granted until another
//     client's call needs them): a mount waits at most once a tick.
//
// File reads, writes and fsyncs are never held, and a write is seen through
// another mount once fsynced (powerfs, "Several mounts of one disk"). It
// skips the test when FUSE cannot be mounted here. The mounts are closed
// at cleanup, after the brokers (register it before Start).
func StallingVolume(t testing.TB, n int, tick time.Duration) ([]string, *Stalls) {
	t.Helper()
	backing := t.TempDir()
	st := &Stalls{tick: tick, origin: time.Now(), uses: map[string]*use{}, granted: map[int]int64{}}
	var dirs []string
	for i := range n {
		fs := powerfs.MountT(t, backing, filepath.Join(t.TempDir(), fmt.Sprintf("mnt%d", i)), powerfs.Options{
			Metadata: powerfs.MetadataImmediate,
			Hold:     func(op string, paths ...string) { st.hold(i, op, paths) },
		})
		dirs = append(dirs, fs.Dir())
	}
	return dirs, st
}

// Stalls is a StallingVolume's server: who used which name and folder in
// the current tick, and how much it held.
type Stalls struct {
	tick   time.Duration
	origin time.Time

	mu      sync.Mutex // guards the fields below
	uses    map[string]*use
	granted map[int]int64 // mount -> the tick it was last let through in after a hold
	held    int
	max     time.Duration
	sum     time.Duration
}

// use is which mounts read and changed a name, or a folder's listing
// (key "ls:" + folder), in tick k.
type use struct {
	k       int64
	read    map[int]bool
	changed map[int]bool
}

// String sums up what was held, for logs.
func (s *Stalls) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d calls held (tick %v), %v in all, longest %v", s.held, s.tick, s.sum.Round(time.Millisecond), s.max.Round(time.Millisecond))
}

// Held is how many calls were held.
func (s *Stalls) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// access is one key a call uses: read or change.
type access struct {
	key    string
	change bool
}

// accesses is what a call reads and changes.
func accesses(op string, paths []string) []access {
	var out []access
	for _, p := range paths {
		p = path.Clean("/" + p)
		switch op {
		case "lookup":
			out = append(out, access{key: p})
		case "readdir":
			out = append(out, access{key: "ls:" + p})
		case "fsyncdir":
			out = append(out, access{key: "ls:" + p, change: true})
		default: // create, mkdir, link, unlink, rmdir, rename
			out = append(out, access{key: p, change: true}, access{key: "ls:" + path.Dir(p), change: true})
		}
	}
	return out
}

func (s *Stalls) hold(mount int, op string, paths []string) {
	acc := accesses(op, paths)
	s.mu.Lock()
	k := int64(time.Since(s.origin) / s.tick)
	if g, ok := s.granted[mount]; (!ok || g != k) && s.conflicts(mount, k, acc) {
		s.mu.Unlock()
		began := time.Now()
		time.Sleep(time.Until(s.origin.Add(time.Duration(k+1) * s.tick)))
		waited := time.Since(began)
		s.mu.Lock()
		s.held++
		s.sum += waited
		s.max = max(s.max, waited)
		k = int64(time.Since(s.origin) / s.tick)
		s.granted[mount] = k
	}
	for _, a := range acc {
		u := s.use(a.key, k)
		if a.change {
			u.changed[mount] = true
		} else {
			u.read[mount] = true
		}
	}
	s.mu.Unlock()
}

// conflicts reports whether another mount's use in tick k holds a call
// with these accesses. Called with mu held.
func (s *Stalls) conflicts(mount int, k int64, acc []access) bool {
	other := func(m map[int]bool) bool {
		for x := range m {
			if x != mount {
				return true
			}
		}
		return false
	}
	for _, a := range acc {
		u := s.uses[a.key]
		if u == nil || u.k != k {
			continue
		}
		listing := len(a.key) > 3 && a.key[:3] == "ls:"
		switch {
		case other(u.changed) && !(listing && a.change):
			return true // reading or changing what another changed
		case a.change && other(u.read):
			return true // changing what another read
		}
	}
	return false
}

// use is key's use in tick k (reset when it is from an earlier one).
// Called with mu held.
func (s *Stalls) use(key string, k int64) *use {
	u := s.uses[key]
	if u == nil || u.k != k {
		u = &use{k: k, read: map[int]bool{}, changed: map[int]bool{}}
		s.uses[key] = u
	}
	return u
}
