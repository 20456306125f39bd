package topics

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/volume"
)

// Defect: Kafka accepts topic names that start with a dot, and kaas
// created them, then hid them (the directory listing skipped every name
// starting with "."): produce answered UNKNOWN_TOPIC_OR_PARTITION, they
// were not listed, and creating them again said TOPIC_ALREADY_EXISTS. A
// topic named like a staging file (".stage-…") was deleted at start-up
// once ten minutes old.
func TestTopicNamesStartingWithADotAreTopicsLikeAnyOther(t *testing.T) {
	dir := t.TempDir()
	r, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{".hidden", ".stage-0123456789abcdef", "..x"}
	for _, n := range names {
		if _, err := r.Create(n, 1, nil, false); err != nil {
			t.Fatalf("create %q: %v", n, err)
		}
	}
	old := time.Now().Add(-time.Hour)
	for _, n := range names {
		if err := os.Chtimes(filepath.Join(volume.TopicsDir(dir), n+".json"), old, old); err != nil {
			t.Fatal(err)
		}
	}
	again, err := Open(dir, nil) // another broker, or a restart
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, ok := again.Get(n); !ok {
			t.Errorf("topic %q is not there after a restart", n)
		}
	}
	listed := map[string]bool{}
	for _, tp := range again.All() {
		listed[tp.Name] = true
	}
	for _, n := range names {
		if !listed[n] {
			t.Errorf("topic %q is not listed: %v", n, listed)
		}
	}
}
