package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

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
