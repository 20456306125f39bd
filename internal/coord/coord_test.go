package coord

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/route"
)

// assignment builds an assignment over brokers kaas-0..n-1, all alive
// unless listed dead, with explicit group placements.
func assignment(version int64, n int, dead []string, placed map[string]string) *cluster.Assignment {
	a := &cluster.Assignment{ControllerEpoch: 1, AssignmentVersion: version, Controller: "kaas-0"}
	isDead := map[string]bool{}
	for _, d := range dead {
		isDead[d] = true
	}
	for i := range n {
		id := fmt.Sprintf("kaas-%d", i)
		h := cluster.Alive
		if isDead[id] {
			h = cluster.Dead
		}
		a.Brokers = append(a.Brokers, cluster.BrokerRow{ID: id, Health: h, NodeID: int32(i)})
	}
	for g, b := range placed {
		a.ConsumerGroups = append(a.ConsumerGroups, cluster.GroupRow{GroupID: g, Broker: b, Epoch: 1})
	}
	return a
}

// broker is one coordinator over a shared dir, as a broker would hold it.
func newCoord(t *testing.T, dir, me string) *Coordinator { return newCoordWith(t, dir, me, nil) }

// newCoordWith is newCoord with its configuration adjusted by adjust (nil:
// none).
func newCoordWith(t *testing.T, dir, me string, adjust func(*Config)) *Coordinator {
	t.Helper()
	st, err := offsets.Open(offsets.Options{Dir: filepath.Join(dir, "__cluster", "__consumer_offsets")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	gc := group.DefaultConfig()
	gc.InitialRebalanceDelay = 0
	cfg := Config{Me: me, Store: st, Group: gc}
	if adjust != nil {
		adjust(&cfg)
	}
	return New(cfg)
}

func tp(p int32) offsets.TP { return offsets.TP{Topic: "orders", Partition: p} }

func commit(t *testing.T, c *Coordinator, g string, offs map[int32]int64) error {
	t.Helper()
	m := map[offsets.TP]offsets.Offset{}
	for p, o := range offs {
		m[tp(p)] = offsets.Offset{Offset: o, LeaderEpoch: -1, ExpireTimestamp: -1}
	}
	wait, _, err := c.Commit(CommitInput{Group: g, Generation: -1, Offsets: m})
	if err != nil {
		return err
	}
	return wait(context.Background())
}

func fetchAll(t *testing.T, c *Coordinator, g string) map[int32]int64 {
	t.Helper()
	got, err := c.Fetch(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	for k, v := range got {
		out[k.Partition] = v.Offset
	}
	return out
}

// groupOn finds a group id whose hash home over 3 brokers is broker id.
func groupOn(id string, salt string) string {
	ids := []string{"kaas-0", "kaas-1", "kaas-2"}
	for i := 0; ; i++ {
		g := fmt.Sprintf("%s-%d", salt, i)
		if route.Preferred(g, ids) == id {
			return g
		}
	}
}

func TestTrap1CommitToUnloadedGroupKeepsOtherPartitions(t *testing.T) {
	dir := t.TempDir()
	g := groupOn("kaas-0", "t1")
	a := newCoord(t, dir, "kaas-0")
	a.Apply(nil, assignment(1, 3, nil, nil))
	if err := commit(t, a, g, map[int32]int64{0: 10, 1: 11}); err != nil {
		t.Fatal(err)
	}
	// kaas-0 dies; kaas-1 (say) takes over and commits one partition
	// without ever having loaded the group.
	next := assignment(2, 3, []string{"kaas-0"}, nil)
	owner, _ := NewTable(next).Group(g)
	b := newCoord(t, dir, owner.ID)
	b.Apply(nil, next)
	if err := commit(t, b, g, map[int32]int64{2: 12}); err != nil {
		t.Fatal(err)
	}
	if got := fetchAll(t, b, g); fmt.Sprint(got) != "map[0:10 1:11 2:12]" {
		t.Fatalf("offsets after takeover commit: %v", got)
	}
}

func TestTrap2DeleteGroupThatExistsOnlyAsOffsetsFile(t *testing.T) {
	dir := t.TempDir()
	a := newCoord(t, dir, "kaas-0")
	a.Apply(nil, assignment(1, 1, nil, nil))
	if err := commit(t, a, "file-only", map[int32]int64{0: 1}); err != nil {
		t.Fatal(err)
	}
	b := newCoord(t, dir, "kaas-0") // a fresh broker: nothing in memory
	b.Apply(nil, assignment(2, 1, nil, nil))
	if err := b.DeleteGroup(context.Background(), "file-only"); err != nil {
		t.Fatalf("delete of an offsets-only group: %v", err)
	}
	if ok, _ := b.store.Exists("file-only"); ok {
		t.Fatal("offsets file left behind")
	}
	if err := b.DeleteGroup(context.Background(), "file-only"); !errors.Is(err, ErrGroupNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestTrap3MovedAwayAndBackDoesNotResurrectStaleOffsets(t *testing.T) {
	dir := t.TempDir()
	g := groupOn("kaas-0", "t3")
	a := newCoord(t, dir, "kaas-0")
	v1 := assignment(1, 3, nil, nil)
	a.Apply(nil, v1)
	if err := commit(t, a, g, map[int32]int64{0: 10}); err != nil {
		t.Fatal(err)
	}
	// Move g to kaas-2 with an explicit entry; kaas-2 commits a newer offset.
	v2 := assignment(2, 3, nil, map[string]string{g: "kaas-2"})
	a.Apply(v1, v2)
	for _, r := range a.Resident() {
		if r == g {
			t.Fatal("the losing broker still holds the group in memory")
		}
	}
	b := newCoord(t, dir, "kaas-2")
	b.Apply(nil, v2)
	if err := commit(t, b, g, map[int32]int64{0: 20}); err != nil {
		t.Fatal(err)
	}
	// Back to kaas-0: it must read 20, not its old 10.
	v3 := assignment(3, 3, nil, nil)
	a.Apply(v2, v3)
	b.Apply(v2, v3)
	if got := fetchAll(t, a, g); got[0] != 20 {
		t.Fatalf("resurrected stale offset: %v", got)
	}
	// And the broker that lost it is refused by the fence.
	if err := commit(t, b, g, map[int32]int64{0: 5}); !errors.Is(err, ErrNotCoordinator) {
		t.Fatalf("commit on the broker that lost the group: %v", err)
	}
}

func TestTrap4ConcurrentCommitsToOneGroup(t *testing.T) {
	dir := t.TempDir()
	a := newCoord(t, dir, "kaas-0")
	a.Apply(nil, assignment(1, 1, nil, nil))
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				if err := commit(t, a, "hot", map[int32]int64{int32(w): int64(i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b := newCoord(t, dir, "kaas-0") // read back from disk only
	b.Apply(nil, assignment(2, 1, nil, nil))
	got := fetchAll(t, b, "hot")
	for w := range 64 {
		if got[int32(w)] != 19 {
			t.Fatalf("partition %d at %d, want 19", w, got[int32(w)])
		}
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "__cluster", "__consumer_offsets"))
	for _, e := range ents {
		if e.Name()[0] == '.' {
			t.Fatalf("temp file left: %s", e.Name())
		}
	}
}

func TestTrap5HostileGroupIDsStayInTheOffsetsDirectory(t *testing.T) {
	dir := t.TempDir()
	a := newCoord(t, dir, "kaas-0")
	a.Apply(nil, assignment(1, 1, nil, nil))
	sentinel := filepath.Join(dir, "__cluster", "assignment.json")
	os.WriteFile(sentinel, []byte("keep"), 0o644)
	for _, g := range []string{"../assignment", "../../etc/passwd", "a/b", "..", ".", "\x00", "__cluster", string(make([]byte, 300))} {
		if err := commit(t, a, g, map[int32]int64{0: 7}); err != nil {
			t.Fatalf("%q: %v", g, err)
		}
		if got := fetchAll(t, a, g); got[0] != 7 {
			t.Fatalf("%q: read back %v", g, got)
		}
	}
	if data, _ := os.ReadFile(sentinel); string(data) != "keep" {
		t.Fatal("a group id overwrote cluster state")
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "__cluster"))
	for _, e := range ents {
		switch e.Name() {
		case "assignment.json", "__consumer_offsets":
		default:
			t.Fatalf("a group file escaped into __cluster: %s", e.Name())
		}
	}
}

func TestTrap6DiskErrorIsAnErrorNotASuccess(t *testing.T) {
	dir := t.TempDir()
	a := newCoord(t, dir, "kaas-0")
	a.Apply(nil, assignment(1, 1, nil, nil))
	if err := commit(t, a, "g", map[int32]int64{0: 1}); err != nil {
		t.Fatal(err)
	}
	// Break the volume under the store: the offsets directory becomes a file.
	od := filepath.Join(dir, "__cluster", "__consumer_offsets")
	os.Rename(od, od+".moved")
	os.WriteFile(od, []byte("not a directory"), 0o644)
	err := commit(t, a, "g", map[int32]int64{0: 2})
	if err == nil {
		t.Fatal("a failed write was reported as success")
	}
	if !errors.Is(err, ErrCoordinatorLoadError) {
		t.Fatalf("error %v is not the storage error", err)
	}
	// Nothing acknowledged was lost: the earlier commit is still on disk.
	os.Remove(od)
	os.Rename(od+".moved", od)
	b := newCoord(t, dir, "kaas-0")
	b.Apply(nil, assignment(2, 1, nil, nil))
	if got := fetchAll(t, b, "g"); got[0] != 1 {
		t.Fatalf("after the failure: %v", got)
	}
}

func TestTrap10BootstrapSourceNeverServesClusterTraffic(t *testing.T) {
	dir := t.TempDir()
	a := newCoord(t, dir, "kaas-0") // clustered: not Standalone
	if a.Serving() {
		t.Fatal("the bootstrap source serves")
	}
	if err := commit(t, a, "g", map[int32]int64{0: 1}); !errors.Is(err, ErrNotAvailable) {
		t.Fatalf("commit before any assignment: %v", err)
	}
	if _, err := a.Fetch("g", nil); !errors.Is(err, ErrNotAvailable) {
		t.Fatalf("fetch before any assignment: %v", err)
	}
	if _, err := a.FindGroup("g"); !errors.Is(err, ErrNotAvailable) {
		t.Fatalf("find before any assignment: %v", err)
	}
	if _, err := a.Join("g", group.JoinInput{}); !errors.Is(err, ErrNotAvailable) {
		t.Fatalf("join before any assignment: %v", err)
	}
	// A brand-new group is served as soon as an assignment is applied,
	// without any explicit entry for it.
	a.Apply(nil, assignment(1, 1, nil, nil))
	if err := commit(t, a, "brand-new", map[int32]int64{0: 1}); err != nil {
		t.Fatalf("fresh group after the swap: %v", err)
	}
}

func TestTrap11ControllerMintingNeverMovesAGroup(t *testing.T) {
	// The controller mints entries with cluster.Compute; brokers route with
	// coord.Table. For random broker sets and liveness, a minted entry
	// always names the broker the hash already picked.
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := 1 + r.IntN(12)
		obs := map[string]cluster.Observed{}
		for i := range n {
			h := cluster.Alive
			if i > 0 && r.IntN(3) == 0 {
				h = cluster.Dead
			}
			var groups []string
			for j := range 20 {
				groups = append(groups, fmt.Sprintf("r%d-g%d-%d", round, i, j))
			}
			obs[fmt.Sprintf("kaas-%d", i)] = cluster.Observed{Health: h, Report: cluster.Report{Groups: groups}}
		}
		a := cluster.Compute(cluster.Inputs{Epoch: 1, Me: "kaas-0", Now: time.Now(), Brokers: obs})
		withEntries := NewTable(a)
		noEntries := *a
		noEntries.ConsumerGroups = nil
		hashOnly := NewTable(&noEntries)
		for _, e := range a.ConsumerGroups {
			x, _ := withEntries.Group(e.GroupID)
			y, _ := hashOnly.Group(e.GroupID)
			if x.ID != y.ID || x.ID != e.Broker {
				t.Fatalf("round %d: entry %+v routes to %s, the hash to %s", round, e, x.ID, y.ID)
			}
		}
	}
}

func TestOrphanSweepDropsEveryResidentGroupRoutedElsewhere(t *testing.T) {
	dir := t.TempDir()
	a := newCoord(t, dir, "kaas-0")
	v1 := assignment(1, 1, nil, nil) // kaas-0 alone owns everything
	a.Apply(nil, v1)
	var mine []string
	for i := range 50 {
		g := fmt.Sprintf("sweep-%d", i)
		if err := commit(t, a, g, map[int32]int64{0: int64(i)}); err != nil {
			t.Fatal(err)
		}
		mine = append(mine, g)
	}
	// Two brokers join: the sweep must drop exactly the groups now routed away.
	v2 := assignment(2, 3, nil, nil)
	a.Apply(v1, v2)
	tbl := NewTable(v2)
	resident := map[string]bool{}
	for _, g := range a.Resident() {
		resident[g] = true
	}
	for _, g := range mine {
		owner, _ := tbl.Group(g)
		if (owner.ID == "kaas-0") != resident[g] {
			t.Fatalf("group %s owned by %s but resident=%v", g, owner.ID, resident[g])
		}
	}
	list, err := a.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range list {
		if owner, _ := tbl.Group(l.Group); owner.ID != "kaas-0" {
			t.Fatalf("ListGroups shows %s owned by %s", l.Group, owner.ID)
		}
	}
	if _, err := a.Describe(groupOn("kaas-1", "sweep-x")); !errors.Is(err, ErrNotCoordinator) {
		t.Fatalf("describe of a group owned elsewhere: %v", err)
	}
}

func TestUnloadAnswersParkedJoinsWithNotCoordinator(t *testing.T) {
	dir := t.TempDir()
	a := newCoord(t, dir, "kaas-0")
	v1 := assignment(1, 1, nil, nil)
	a.Apply(nil, v1)
	g := groupOn("kaas-1", "park")
	// A v3 join (no member id handshake) parks until the join phase ends.
	ch, err := a.Join(g, group.JoinInput{Version: 3, ProtocolType: "consumer",
		Protocols: []group.Protocol{{Name: "range"}}, SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// It may have completed at once (delay 0); join a second member that parks.
	select {
	case <-ch:
	default:
	}
	ch2, err := a.Join(g, group.JoinInput{Version: 3, ProtocolType: "consumer",
		Protocols: []group.Protocol{{Name: "range"}}, SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a.Apply(v1, assignment(2, 3, nil, nil)) // g now routes to kaas-1
	select {
	case r := <-ch2:
		if r.Err != group.ErrNotCoordinator {
			t.Fatalf("parked join answered %s", group.ErrName(r.Err))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a parked join was left hanging when the group moved")
	}
}

func TestFindCoordinatorWithNoAliveBrokerIsNotAvailable(t *testing.T) {
	a := newCoord(t, t.TempDir(), "kaas-0")
	a.Apply(nil, assignment(1, 3, []string{"kaas-0", "kaas-1", "kaas-2"}, nil))
	if _, err := a.FindGroup("g"); !errors.Is(err, ErrNotAvailable) {
		t.Fatalf("group: %v", err)
	}
	if _, err := a.FindTxn("tx"); !errors.Is(err, ErrNotAvailable) {
		t.Fatalf("transactional id: %v", err)
	}
}

func TestEvictIdleKeepsMemoryToGroupsInUse(t *testing.T) {
	dir := t.TempDir()
	st, err := offsets.Open(offsets.Options{Dir: filepath.Join(dir, "off")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A clock that starts at the real time: the group's timers are real
	// timers armed for the clock's deadlines.
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	gc := group.DefaultConfig()
	gc.InitialRebalanceDelay = 0
	c := New(Config{Me: "kaas-0", Store: st, Group: gc, Now: clock})
	c.Apply(nil, assignment(1, 1, nil, nil))
	for i := range 20 {
		if err := commit(t, c, fmt.Sprintf("idle-%d", i), map[int32]int64{0: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// One group with a member stays.
	if _, err := c.Join("busy", group.JoinInput{Version: 3, ProtocolType: "consumer",
		Protocols: []group.Protocol{{Name: "range"}}, SessionTimeout: 30 * time.Second, RebalanceTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if n := c.EvictIdle(time.Minute); n != 0 {
		t.Fatalf("evicted %d groups that committed just now", n)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	if n := c.EvictIdle(time.Minute); n != 20 {
		t.Fatalf("evicted %d of 20 idle groups", n)
	}
	if r := c.Resident(); len(r) != 1 || r[0] != "busy" {
		t.Fatalf("resident after eviction: %v", r)
	}
	// The offsets are still there, loaded again on the next request.
	if got := fetchAll(t, c, "idle-7"); got[0] != 7 {
		t.Fatalf("evicted group's offsets: %v", got)
	}
}
