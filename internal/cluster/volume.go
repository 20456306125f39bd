package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"time"

	"github.com/kaas-dev/kaas/internal/fsutil"
)

// Volume is how the cluster runtime and the file elector reach their files
// on the shared volume (reports, election records, assignment.json,
// removal requests). The default is the local view of the volume (OS);
// tests put a view in place that shows other brokers' writes late, as a
// network file system may (docs/volume.md).
type Volume interface {
	// ReadDir lists the names in dir ("" entries are never returned).
	ReadDir(dir string) ([]string, error)
	// ReadFile reads a whole file.
	ReadFile(path string) ([]byte, error)
	// Stamp identifies the version of a file as a stat shows it: equal
	// stamps, same content (for OS, fsutil.Version as text). An absent file
	// is an error wrapping fs.ErrNotExist.
	Stamp(path string) (string, error)
	// WriteFile durably replaces a file (temp, fsync, rename, fsync dir).
	WriteFile(path string, data []byte) error
	// CreateExclusive durably creates a file that must not exist (an error
	// wrapping fs.ErrExist when it does).
	CreateExclusive(path string, data []byte) error
	// Remove removes a file (absent is not an error).
	Remove(path string) error
	// MkdirAll creates a folder and its parents.
	MkdirAll(dir string) error
}

// OS is the Volume of the local view of the volume.
type OS struct{}

// ReadDir implements Volume.
func (OS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ents))
	for i, e := range ents {
		out[i] = e.Name()
	}
	return out, nil
}

// ReadFile implements Volume.
func (OS) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

// Stamp implements Volume.
func (OS) Stamp(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	return fsutil.VersionOf(st).String(), nil
}

// WriteFile implements Volume.
func (OS) WriteFile(path string, data []byte) error { return fsutil.WriteFile(path, data) }

// CreateExclusive implements Volume.
func (OS) CreateExclusive(path string, data []byte) error { return fsutil.CreateExclusive(path, data) }

// Remove implements Volume.
func (OS) Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// MkdirAll implements Volume.
func (OS) MkdirAll(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// loopVolume is the runtime's view of its Volume: every call that returns
// is progress of the loop, which makes them one after another. A step is a
// dozen calls, and a file server that holds each conflicting call until its
// next tick (docs/volume.md, "Stalls") makes a step that moves call by call
// last longer than the stall limit; the heartbeat must go on speaking for
// that loop and stop only for one call that waits longer than the limit.
// Only the loop (and Stop, once the loop and the heartbeat ended) calls it.
type loopVolume struct {
	Volume
	progress *atomic.Pointer[time.Time]
}

func (v loopVolume) returned() {
	now := time.Now()
	v.progress.Store(&now)
}

// ReadDir implements Volume.
func (v loopVolume) ReadDir(dir string) ([]string, error) {
	defer v.returned()
	return v.Volume.ReadDir(dir)
}

// ReadFile implements Volume.
func (v loopVolume) ReadFile(path string) ([]byte, error) {
	defer v.returned()
	return v.Volume.ReadFile(path)
}

// Stamp implements Volume.
func (v loopVolume) Stamp(path string) (string, error) {
	defer v.returned()
	return v.Volume.Stamp(path)
}

// WriteFile implements Volume.
func (v loopVolume) WriteFile(path string, data []byte) error {
	defer v.returned()
	return v.Volume.WriteFile(path, data)
}

// CreateExclusive implements Volume.
func (v loopVolume) CreateExclusive(path string, data []byte) error {
	defer v.returned()
	return v.Volume.CreateExclusive(path, data)
}

// Remove implements Volume.
func (v loopVolume) Remove(path string) error {
	defer v.returned()
	return v.Volume.Remove(path)
}

// MkdirAll implements Volume.
func (v loopVolume) MkdirAll(dir string) error {
	defer v.returned()
	return v.Volume.MkdirAll(dir)
}
