package powerfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// mountT mounts a fresh backing dir, or skips the test when FUSE cannot be
// mounted here.
func mountT(t *testing.T, o Options) *FS {
	t.Helper()
	return MountT(t, t.TempDir(), t.TempDir(), o)
}

func cut(t *testing.T, fsys *FS) Loss {
	t.Helper()
	loss, err := fsys.Cut()
	if err != nil {
		t.Fatalf("cut: %v", err)
	}
	return loss
}

// writeFile writes data to path and, when sync, fsyncs the file.
func writeFile(t *testing.T, path string, data []byte, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatalf("fsync %s: %v", path, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync dir %s: %v", dir, err)
	}
}

func wantFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s = %q, want %q", filepath.Base(path), got, want)
	}
}

func wantMissing(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s: want it gone, stat says %v", filepath.Base(path), err)
	}
}

func TestUnsyncedWriteIsLostOnCut(t *testing.T) {
	fsys := mountT(t, Options{Metadata: MetadataImmediate})
	p := filepath.Join(fsys.Dir(), "f")
	writeFile(t, p, []byte("never synced"), false)
	if l := fsys.Pending(); l.Files != 1 || l.Bytes == 0 {
		t.Fatalf("pending before the cut = %+v, want one file", l)
	}
	if loss := cut(t, fsys); loss.Files != 1 {
		t.Fatalf("cut dropped %+v, want one file", loss)
	}
	// Immediate metadata: the name survived, its data did not.
	wantFile(t, p, nil)
}

func TestSyncedWriteSurvivesCut(t *testing.T) {
	fsys := mountT(t, Options{})
	p := filepath.Join(fsys.Dir(), "f")
	writeFile(t, p, []byte("synced"), true)
	syncDir(t, fsys.Dir())
	if l := fsys.Pending(); l != (Loss{}) {
		t.Fatalf("pending after fsync of file and dir = %+v, want nothing", l)
	}
	cut(t, fsys)
	wantFile(t, p, []byte("synced"))
}

// TestOnlyTheSyncedPrefixSurvives: data appended after the last fsync goes.
func TestOnlyTheSyncedPrefixSurvives(t *testing.T) {
	fsys := mountT(t, Options{})
	p := filepath.Join(fsys.Dir(), "log")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syncDir(t, fsys.Dir())
	if _, err := f.WriteAt([]byte("first."), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("second."), 6); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(3); err == nil {
		// A truncate is pending data too; write again past it.
		if _, err := f.WriteAt([]byte("third"), 3); err != nil {
			t.Fatal(err)
		}
	}
	wantFile(t, p, []byte("firthird"))
	f.Close()
	cut(t, fsys)
	wantFile(t, p, []byte("first."))
}

// TestReadYourWritesBeforeTheCut: another handle (and a stat) sees pending
// data; the backing file does not have it.
func TestReadYourWritesBeforeTheCut(t *testing.T) {
	fsys := mountT(t, Options{})
	p := filepath.Join(fsys.Dir(), "f")
	writeFile(t, p, []byte("pending data"), false)
	wantFile(t, p, []byte("pending data"))
	if fi, err := os.Stat(p); err != nil || fi.Size() != 12 {
		t.Fatalf("stat = %v, %v; want size 12", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(fsys.Backing(), "f")); err != nil || len(b) != 0 {
		t.Fatalf("backing file = %q, %v; want empty (nothing persisted)", b, err)
	}
}

// TestFsyncThroughAnotherHandlePersists: fsync persists the file, whichever
// handle wrote the data.
func TestFsyncThroughAnotherHandlePersists(t *testing.T) {
	fsys := mountT(t, Options{})
	p := filepath.Join(fsys.Dir(), "f")
	writeFile(t, p, nil, true)
	syncDir(t, fsys.Dir())
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("written by w")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	cut(t, fsys)
	wantFile(t, p, []byte("written by w"))
}

// TestNamespaceJournal: the durable-replace pattern (temp, fsync, rename,
// fsync dir) and the ways to get it wrong.
func TestNamespaceJournal(t *testing.T) {
	fsys := mountT(t, Options{})
	dir := filepath.Join(fsys.Dir(), "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "state")
	writeFile(t, target, []byte("v1"), true)
	syncDir(t, dir)
	syncDir(t, fsys.Dir())

	// Renamed without an fsync of the directory: reverted.
	tmp := filepath.Join(dir, ".state.tmp")
	writeFile(t, tmp, []byte("v2"), true)
	if err := os.Rename(tmp, target); err != nil {
		t.Fatal(err)
	}
	wantFile(t, target, []byte("v2"))
	if loss := cut(t, fsys); loss.Ops != 2 {
		t.Fatalf("cut reverted %d namespace ops, want 2 (create, rename)", loss.Ops)
	}
	wantFile(t, target, []byte("v1"))
	wantMissing(t, tmp)

	// Durability comes a prefix at a time: an fsync of another directory
	// commits this rename too when it comes after it.
	writeFile(t, tmp, []byte("v2b"), true)
	if err := os.Rename(tmp, target); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(fsys.Dir(), "other")
	writeFile(t, other, nil, true)
	syncDir(t, fsys.Dir())
	cut(t, fsys)
	wantFile(t, target, []byte("v2b"))

	// With the directory fsync: durable.
	writeFile(t, tmp, []byte("v3"), true)
	if err := os.Rename(tmp, target); err != nil {
		t.Fatal(err)
	}
	syncDir(t, dir)
	cut(t, fsys)
	wantFile(t, target, []byte("v3"))
	wantMissing(t, tmp)

	// Data never fsynced, renamed and the directory fsynced: the name is
	// durable, the data is not (the dangerous case).
	writeFile(t, tmp, []byte("v4"), false)
	if err := os.Rename(tmp, target); err != nil {
		t.Fatal(err)
	}
	syncDir(t, dir)
	cut(t, fsys)
	wantFile(t, target, nil)

	// Unlink and rmdir without a directory fsync come back.
	writeFile(t, target, []byte("v5"), true)
	syncDir(t, dir)
	sub := filepath.Join(fsys.Dir(), "empty")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	syncDir(t, fsys.Dir())
	if err := os.Remove(target); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(sub); err != nil {
		t.Fatal(err)
	}
	cut(t, fsys)
	wantFile(t, target, []byte("v5"))
	if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
		t.Fatalf("removed dir after the cut: %v, %v; want it back", fi, err)
	}
	// The graveyard is never visible.
	ents, err := os.ReadDir(fsys.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == graveDir {
			t.Fatal("the graveyard is listed in the mount")
		}
	}
}

// TestExclusiveCreateByHardLink is fsutil.CreateExclusive's pattern: temp,
// fsync, link, unlink temp, fsync dir.
func TestExclusiveCreateByHardLink(t *testing.T) {
	fsys := mountT(t, Options{})
	tmp := filepath.Join(fsys.Dir(), ".block.tmp")
	final := filepath.Join(fsys.Dir(), "block-1")
	writeFile(t, tmp, []byte("owner"), true)
	if err := os.Link(tmp, final); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(tmp, final); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second link: %v, want EEXIST", err)
	}
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	syncDir(t, fsys.Dir())
	cut(t, fsys)
	wantFile(t, final, []byte("owner"))
	wantMissing(t, tmp)
}

func TestInjectedFaults(t *testing.T) {
	fsys := mountT(t, Options{})
	dir := filepath.Join(fsys.Dir(), "seg")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	syncDir(t, fsys.Dir())
	p := filepath.Join(dir, "00.log")

	// The next write fails with EIO, the one after succeeds.
	if err := fsys.Inject(Fault{Op: OpWrite, Path: `^seg/.*\.log$`, Count: 1}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syncDir(t, dir)
	if _, err := f.WriteAt([]byte("lost"), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("first write: %v, want EIO", err)
	}
	if _, err := f.WriteAt([]byte("kept"), 0); err != nil {
		t.Fatalf("second write: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}

	// A failed fsync loses its pending data, even after a later
	// successful fsync (Linux's writeback-error semantics).
	if err := fsys.Inject(Fault{Op: OpFsync, Path: `\.log$`, Errno: syscall.ENOSPC, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("gone"), 4); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fsync: %v, want ENOSPC", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync after the failure: %v", err)
	}
	wantFile(t, p, []byte("keptgone")) // readable until the cut

	// Renames of matching paths fail until cleared.
	if err := fsys.Inject(Fault{Op: OpRename, Path: `^seg/`}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := os.Rename(p, p+".old"); !errors.Is(err, syscall.EIO) {
			t.Fatalf("rename: %v, want EIO", err)
		}
	}
	fsys.ClearFaults()
	if got := fsys.Failed(); got[OpWrite] != 1 || got[OpFsync] != 1 || got[OpRename] != 2 {
		t.Fatalf("failed calls = %v", got)
	}
	f.Close()
	cut(t, fsys)
	// The size change was persisted by the later fsync, the lost block was not.
	wantFile(t, p, []byte("kept\x00\x00\x00\x00"))
}

// TestConcurrentWritersRenamesAndSyncs drives the mount from several
// goroutines at once (writes at random offsets, reads through another
// handle, fsyncs, renames, directory fsyncs) and checks every file against
// a model, before and after Sync and a cut.
func TestConcurrentWritersRenamesAndSyncs(t *testing.T) {
	fsys := mountT(t, Options{})
	const workers, steps = 4, 150
	models := make([][]byte, workers)
	names := make([]string, workers)
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			errs <- func() error {
				rng := rand.New(rand.NewPCG(uint64(w), 9))
				dir := filepath.Join(fsys.Dir(), fmt.Sprintf("w%d", w))
				if err := os.Mkdir(dir, 0o755); err != nil {
					return err
				}
				name := filepath.Join(dir, "a")
				f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
				if err != nil {
					return err
				}
				defer func() { f.Close() }()
				var model []byte
				for step := range steps {
					switch op := rng.IntN(10); {
					case op < 6:
						p := make([]byte, 1+rng.IntN(9000))
						for i := range p {
							p[i] = byte(rng.IntN(256))
						}
						off := rng.Int64N(20000)
						if _, err := f.WriteAt(p, off); err != nil {
							return fmt.Errorf("step %d write: %w", step, err)
						}
						if end := off + int64(len(p)); end > int64(len(model)) {
							model = append(model, make([]byte, end-int64(len(model)))...)
						}
						copy(model[off:], p)
					case op < 8:
						if err := f.Sync(); err != nil {
							return fmt.Errorf("step %d fsync: %w", step, err)
						}
					default:
						next := filepath.Join(dir, map[string]string{"a": "b", "b": "a"}[filepath.Base(name)])
						if err := os.Rename(name, next); err != nil {
							return fmt.Errorf("step %d rename: %w", step, err)
						}
						name = next
						d, err := os.Open(dir)
						if err != nil {
							return err
						}
						err = d.Sync()
						d.Close()
						if err != nil {
							return fmt.Errorf("step %d fsync dir: %w", step, err)
						}
					}
					if got, err := os.ReadFile(name); err != nil || !bytes.Equal(got, model) {
						return fmt.Errorf("step %d: read %d bytes (%v), the model has %d", step, len(got), err, len(model))
					}
				}
				models[w], names[w] = model, name
				return nil
			}()
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := fsys.Sync(); err != nil {
		t.Fatalf("sync: %v", err)
	}
	cut(t, fsys)
	for w := range workers {
		wantFile(t, names[w], models[w])
	}
}

// TestTwoMountsOfOneDisk: two mounts of one backing dir are two clients.
// A name made through one is seen through the other at once, data only
// once fsynced; Hold sees every namespace call with its paths and can
// hold it.
func TestTwoMountsOfOneDisk(t *testing.T) {
	disk := t.TempDir()
	var mu sync.Mutex
	calls := map[string][]string{}
	mount := func(name string, hold time.Duration) string {
		return MountT(t, disk, filepath.Join(t.TempDir(), name), Options{Metadata: MetadataImmediate, Hold: func(op string, paths ...string) {
			mu.Lock()
			calls[name] = append(calls[name], op+" "+strings.Join(paths, ","))
			mu.Unlock()
			if op == "rename" {
				time.Sleep(hold)
			}
		}}).Dir()
	}
	a, b := mount("a", 300*time.Millisecond), mount("b", 0)

	f, err := os.OpenFile(filepath.Join(a, "log"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("synced")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(b, "log")); err != nil || len(got) != 0 {
		t.Fatalf("b reads %q, %v before a's fsync; want the empty file", got, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(b, "log")); err != nil || string(got) != "synced" {
		t.Fatalf("b reads %q, %v after a's fsync", got, err)
	}

	if err := os.WriteFile(filepath.Join(a, "tmp"), []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := os.Rename(filepath.Join(a, "tmp"), filepath.Join(a, "file")); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Errorf("rename through a took %v; Hold holds it 300ms", took)
	}
	if _, err := os.Stat(filepath.Join(b, "file")); err != nil {
		t.Fatalf("b does not see a's rename: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(calls["a"], "rename tmp,file") || !slices.Contains(calls["b"], "lookup file") {
		t.Errorf("Hold saw a %v, b %v", calls["a"], calls["b"])
	}
}
