package powerfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Two mounts of one folder with Cache set, as two NFS clients with
// actimeo=2 (and lookupcache=all, or positive): a stat on one shows the
// other's change up to the attribute timeout late, a name the other created
// stays invisible up to the negative timeout (at once with 0), and an open
// reads the file's current bytes (close-to-open).
func TestCacheShowsAnotherMountsChangesLate(t *testing.T) {
	for _, negative := range []time.Duration{2 * time.Second, 0} {
		backing := t.TempDir()
		o := Options{Metadata: MetadataImmediate, Cache: Cache{Entry: 2 * time.Second, Attr: 2 * time.Second, Negative: negative}}
		m0 := MountT(t, backing, filepath.Join(t.TempDir(), "m0"), o)
		m1 := MountT(t, backing, filepath.Join(t.TempDir(), "m1"), o)
		a, b := filepath.Join(m0.Dir(), "f"), filepath.Join(m1.Dir(), "f")
		writeSynced(t, a, "1")
		if fi, err := os.Stat(b); err != nil || fi.Size() != 1 {
			t.Fatalf("first stat: %v %v", fi, err)
		}
		writeSynced(t, a, "22")
		if fi, err := os.Stat(b); err != nil || fi.Size() != 1 {
			t.Fatalf("stat within the attribute timeout: %v %v, want the cached size 1", fi, err)
		}
		if data, err := os.ReadFile(b); err != nil || string(data) != "22" {
			t.Fatalf("open and read: %q %v, want the current bytes", data, err)
		}
		n0, n1 := filepath.Join(m0.Dir(), "new"), filepath.Join(m1.Dir(), "new")
		if _, err := os.Stat(n1); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("stat of a name not created yet: %v", err)
		}
		if err := os.WriteFile(n0, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := os.Stat(n1)
		if negative > 0 && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("negative timeout %v: another mount's new name was seen at once (%v)", negative, err)
		}
		if negative == 0 && err != nil {
			t.Fatalf("negative timeout 0: another mount's new name not seen: %v", err)
		}
		time.Sleep(2500 * time.Millisecond)
		if fi, err := os.Stat(b); err != nil || fi.Size() != 2 {
			t.Fatalf("stat after the attribute timeout: %v %v, want size 2", fi, err)
		}
		if _, err := os.Stat(n1); err != nil {
			t.Fatalf("the new name after the timeout: %v", err)
		}
	}
}

// writeSynced writes data to path and fsyncs it: another mount sees it then.
func writeSynced(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
