package broker

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/testutil"
	"github.com/kaas-dev/kaas/internal/volume"
)

// Defect: the temp files a crashed writer leaves beside the group files
// were never removed (CleanTemp ran only in tests). A broker now removes
// those older than an hour in the background, at start and with every
// offsets retention check; a fresh one (a live write's) stays.
func TestCrashedWritersTempFilesAreRemoved(t *testing.T) {
	dir := t.TempDir()
	odir := volume.OffsetsDir(dir)
	if err := os.MkdirAll(odir, 0o755); err != nil {
		t.Fatal(err)
	}
	stale, fresh := filepath.Join(odir, ".tmp-crashed-1"), filepath.Join(odir, ".tmp-live-1")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte(`{"version":1`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	startBroker(t, dir, nil)
	if err := testutil.Poll(10*time.Second, func() error {
		if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
			return errors.New("the crashed writer's temp file is still there")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("a fresh temp file was removed: %v", err)
	}
}
