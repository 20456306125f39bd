package coord

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/powerfs"
	"github.com/kaas-dev/kaas/internal/testutil"
)

// Defect: applying an assignment waited on the lock of every resident
// group, and a writer holds it across fsync, rename and the folder's
// fsync: one group's write held by the volume held the broker's cluster
// loop (its liveness reports, its drain, and, on the controller, the
// cluster's assignments). The rename here is held on a FUSE mount until
// the test lets it go; Apply and ActiveGroups (read by every liveness
// report) must return meanwhile.
func TestApplyDoesNotWaitForAGroupWriteInFlight(t *testing.T) {
	g := groupOn("kaas-0", "stall")
	var armed atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	fsys := powerfs.MountT(t, t.TempDir(), filepath.Join(t.TempDir(), "mnt"), powerfs.Options{
		Metadata: powerfs.MetadataImmediate,
		Hold: func(op string, paths ...string) {
			if op == "rename" && armed.Load() && len(paths) == 2 && strings.HasSuffix(paths[1], "/"+offsets.FileName(g)) {
				heldOnce.Do(func() { close(held) })
				<-release
			}
		},
	})
	let := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(let) // before the unmount
	a := newCoord(t, fsys.Dir(), "kaas-0")
	first := assignment(1, 3, nil, nil)
	a.Apply(nil, first)
	if err := commit(t, a, g, map[int32]int64{0: 1}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	committed := make(chan error, 1)
	go func() { committed <- commit(t, a, g, map[int32]int64{0: 2}) }()
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the group's rename was never held")
	}
	applied := make(chan struct{})
	go func() {
		a.Apply(first, assignment(2, 3, nil, map[string]string{g: "kaas-1"}))
		a.ActiveGroups()
		close(applied)
	}()
	select {
	case <-applied:
	case <-time.After(10 * time.Second):
		let()
		<-applied
		t.Fatal("Apply waited for the group's write held by the volume")
	}
	let()
	// The write landed after this broker applied the move, while its view
	// was fresh: the broker gaining the group waits for such writes
	// (cluster.Runtime.Settled), so it is acknowledged.
	if err := <-committed; err != nil {
		t.Fatalf("the commit whose rename landed after the move: %v", err)
	}
	if err := testutil.Poll(10*time.Second, func() error {
		for _, r := range a.Resident() {
			if r == g {
				return errors.New("the moved group is still resident")
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
