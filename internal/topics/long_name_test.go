package topics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTopicNameOf249CharactersCreatesGrowsAndDeletes is the regression test
// for names of 229-249 characters failing: the temporary file beside
// <name>.json was named after the topic and passed the file system's
// 255-byte name limit.
func TestTopicNameOf249CharactersCreatesGrowsAndDeletes(t *testing.T) {
	dir := t.TempDir()
	name := strings.Repeat("n", MaxNameLen)
	a, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(name, 1, map[string]string{"retention.ms": "1000"}, false); err != nil {
		t.Fatalf("create %d-character topic: %v", len(name), err)
	}
	if _, err := a.Grow(name, 3, false); err != nil {
		t.Fatalf("grow: %v", err)
	}
	b, err := Open(dir, nil) // another broker, and a restart
	if err != nil {
		t.Fatal(err)
	}
	got, ok := b.Get(name)
	if !ok || got.Partitions != 3 || got.Int64("retention.ms", 0) != 1000 {
		t.Fatalf("another registry sees %+v, %v", got, ok)
	}
	if _, err := b.Delete(name); err != nil {
		t.Fatalf("delete: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "__cluster", "topics"))
	if len(ents) != 0 {
		t.Fatalf("files left after delete: %v", ents)
	}
}

// TestStaleStagingFilesAreRemovedAtOpen: a staging file a crash left behind
// is removed once it is old; a young one may be another broker's write in
// progress and stays.
func TestStaleStagingFilesAreRemovedAtOpen(t *testing.T) {
	dir := t.TempDir()
	topicsDir := filepath.Join(dir, "__cluster", "topics")
	if err := os.MkdirAll(topicsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	stale, young := filepath.Join(topicsDir, stagingPrefix+"stale"), filepath.Join(topicsDir, stagingPrefix+"young")
	for _, p := range []string{stale, young} {
		if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, past, past); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale staging file kept: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Fatalf("young staging file removed: %v", err)
	}
}
