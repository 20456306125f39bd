package coord

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kaas-dev/kaas/internal/offsets"
)

// Defect: a truncated group file made OffsetFetch, OffsetCommit and even
// DeleteGroups fail for good (COORDINATOR_NOT_AVAILABLE), with no way out.
// DeleteGroups now moves the file aside, bytes kept, and the group starts
// over.
func TestTruncatedGroupFileIsMovedAsideByDeleteGroups(t *testing.T) {
	dir := t.TempDir()
	a := newCoord(t, dir, "kaas-0")
	a.Apply(nil, assignment(1, 1, nil, nil))
	if err := commit(t, a, "wedged", map[int32]int64{0: 5, 1: 6}); err != nil {
		t.Fatal(err)
	}
	odir := filepath.Join(dir, "__cluster", "__consumer_offsets")
	path := filepath.Join(odir, offsets.FileName("wedged"))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	torn := data[:len(data)/2]
	if err := os.WriteFile(path, torn, 0o644); err != nil {
		t.Fatal(err)
	}
	b := newCoord(t, dir, "kaas-0") // a broker that reads it for the first time
	b.Apply(nil, assignment(2, 1, nil, nil))
	if _, err := b.Fetch("wedged", nil); err == nil {
		t.Fatal("fetch of a truncated group file succeeded")
	}
	if err := b.DeleteGroup(context.Background(), "wedged"); err != nil {
		t.Fatalf("DeleteGroups of a group whose file is truncated: %v", err)
	}
	entries, err := os.ReadDir(odir)
	if err != nil {
		t.Fatal(err)
	}
	var aside []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), offsets.FileName("wedged")+".corrupt-") {
			aside = append(aside, e.Name())
		}
	}
	if len(aside) != 1 {
		t.Fatalf("files moved aside: %v (all: %v)", aside, entries)
	}
	kept, err := os.ReadFile(filepath.Join(odir, aside[0]))
	if err != nil || !bytes.Equal(kept, torn) {
		t.Fatalf("the damaged bytes were not kept: %v, %d bytes of %d", err, len(kept), len(torn))
	}
	// The group starts over: commits and fetches work again.
	if got := fetchAll(t, b, "wedged"); len(got) != 0 {
		t.Fatalf("offsets after the repair: %v", got)
	}
	if err := commit(t, b, "wedged", map[int32]int64{0: 7}); err != nil {
		t.Fatal(err)
	}
	if got := fetchAll(t, b, "wedged"); got[0] != 7 {
		t.Fatalf("offsets after a new commit: %v", got)
	}
	groups, err := b.store.Groups()
	if err != nil || len(groups) != 1 || groups[0] != "wedged" {
		t.Fatalf("groups listed: %v %v", groups, err)
	}
}
