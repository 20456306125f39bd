package fsutil

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrVolumeContract: the volume does not give what kaas relies on
// (docs/volume.md, "The volume contract").
var ErrVolumeContract = errors.New("the volume does not meet kaas's contract (docs/volume.md)")

// contractOps are the calls CheckVolume makes (tests replace them).
type contractOps struct {
	createExcl func(path string, data []byte) error // O_CREAT|O_EXCL, data, fsync
	link       func(old, new string) error
	rename     func(old, new string) error
	readFile   func(path string) ([]byte, error)
	syncDir    func(dir string) error
}

var osOps = contractOps{
	createExcl: func(path string, data []byte) error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	},
	link:     os.Link,
	rename:   os.Rename,
	readFile: os.ReadFile,
	syncDir:  SyncDir,
}

// CheckVolume checks, in a fresh folder under dir that it removes after,
// what kaas relies on from the volume: an exclusive create refuses a name
// that exists, a hard link refuses an existing target (exclusive create of
// a whole file, CreateExclusive), a rename replaces its target whole, and
// fsync of a file and of a folder succeed. A failure is an error wrapping
// ErrVolumeContract that says which property is missing.
func CheckVolume(dir string) error { return checkVolume(dir, osOps) }

func checkVolume(dir string, ops contractOps) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	probe := filepath.Join(dir, ".volume-check-"+hex.EncodeToString(rnd[:]))
	if err := os.MkdirAll(probe, 0o755); err != nil {
		return fmt.Errorf("%w: cannot create a folder in %s: %w", ErrVolumeContract, dir, err)
	}
	defer os.RemoveAll(probe)
	fail := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("%w: %s (in %s): %w", ErrVolumeContract, what, dir, err)
		}
		return fmt.Errorf("%w: %s (in %s)", ErrVolumeContract, what, dir)
	}
	a := filepath.Join(probe, "a")
	if err := ops.createExcl(a, []byte("first")); err != nil {
		return fail("an exclusive create (O_CREAT|O_EXCL) of a new file with fsync failed", err)
	}
	if err := ops.createExcl(a, []byte("second")); !errors.Is(err, fs.ErrExist) {
		return fail("an exclusive create (O_CREAT|O_EXCL) of an existing name did not fail with EEXIST", err)
	}
	b := filepath.Join(probe, "b")
	if err := ops.createExcl(b, []byte("b")); err != nil {
		return fail("an exclusive create failed", err)
	}
	if err := ops.link(b, a); !errors.Is(err, fs.ErrExist) {
		return fail("a hard link onto an existing name did not fail with EEXIST (kaas creates whole files exclusively by link)", err)
	}
	c := filepath.Join(probe, "c")
	if err := ops.link(b, c); err != nil {
		return fail("a hard link to a new name failed (kaas creates whole files exclusively by link)", err)
	}
	if err := ops.rename(b, a); err != nil {
		return fail("a rename over an existing file failed", err)
	}
	if got, err := ops.readFile(a); err != nil || !bytes.Equal(got, []byte("b")) {
		return fail(fmt.Sprintf("a rename over an existing file did not replace it whole (read %q)", got), err)
	}
	if err := ops.syncDir(probe); err != nil {
		return fail("fsync of a folder failed", err)
	}
	return nil
}
