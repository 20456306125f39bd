// Package fsutil holds the durable file patterns kaas relies on from the
// shared volume: atomic rename within a directory, atomic exclusive create,
// and honest fsync. It imports nothing from kaas.
package fsutil

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// TempName returns a unique temporary name beside path: ".<base>.tmp-<random>".
// Names never collide between writers, brokers or processes.
func TempName(path string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-"+hex.EncodeToString(b[:]))
}

// writeTemp writes data to a fresh temporary file beside path and fsyncs it.
func writeTemp(path string, data []byte) (string, error) {
	tmp := TempName(path)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// WriteFile durably replaces path with data: temp file, fsync, rename, fsync dir.
func WriteFile(path string, data []byte) error {
	tmp, err := writeTemp(path, data)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// CreateExclusive durably creates path with data, failing with an error that
// wraps fs.ErrExist when path already exists. The content is complete before
// the name appears (temp file, fsync, hard link, fsync dir).
func CreateExclusive(path string, data []byte) error {
	tmp, err := writeTemp(path, data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		return err
	}
	if err := os.Remove(tmp); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir fsyncs a directory so that entries created, renamed or removed in
// it are durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
