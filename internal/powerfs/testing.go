package powerfs

import (
	"errors"
	"os"
	"testing"
)

// MountT mounts backingDir at mountpoint for a test (creating mountpoint
// when missing), skips the test when FUSE cannot be mounted here, and
// unmounts at the test's cleanup: register it before what must stop
// using the mount first (brokers on it), so that it runs after.
func MountT(t testing.TB, backingDir, mountpoint string, o Options) *FS {
	t.Helper()
	if err := os.MkdirAll(mountpoint, 0o755); err != nil {
		t.Fatal(err)
	}
	fsys, err := Mount(backingDir, mountpoint, o)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fsys.Close(); err != nil {
			t.Errorf("powerfs: unmount %s: %v", mountpoint, err)
		}
	})
	return fsys
}
