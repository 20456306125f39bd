package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/coord"
	"github.com/kaas-dev/kaas/internal/fsutil"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/route"
	"github.com/kaas-dev/kaas/internal/volume"
)

func init() { Register(ownershipGoal{groups: 10_000, files: 100_000, writes: 20}) }

// ownershipGoal measures what the cluster's ownership state costs at scale,
// on the data dir, without starting a broker:
//
//   - assignment.json with `groups` active groups on 3 alive brokers, built
//     by cluster.Compute from broker reports whose Groups name each group on
//     the broker the routing hash picks (so each becomes an explicit entry),
//     encoded as the controller encodes it (json.Marshal) and written as it
//     writes it (fsutil.WriteFile: temp, fsync, rename, fsync dir): its size,
//     and the p50 of `writes` durable writes against a durable write of a
//     1 KiB file in the same folder, interleaved with them.
//   - one offsets retention pass ((*coord.Coordinator).ExpireOffsets on a
//     standalone coordinator) over `files` group files with one recent
//     offset each, so that none of them expires and none is written: every
//     file is read and checked. One extra group past retention must expire,
//     to show that the pass read the files. Compared with a bare os.ReadDir
//     of the folder.
//
// The scale is a field so that tests can shrink it; the quick run
// (env.Duration < 1 s, as in the takeover and memory goals) shrinks it too.
type ownershipGoal struct {
	groups int // active groups in assignment.json
	files  int // group files in the retention pass
	writes int // timed writes of assignment.json (and of the 1 KiB file)
}

func (ownershipGoal) Name() string { return "ownership-scale" }
func (ownershipGoal) Describe() string {
	return "ownership at scale, on the data dir: assignment.json with 10k groups on 3 brokers (size; durable write p50 ≤ 1 ms + 5 × a durable 1 KiB write); one offsets retention pass over 100k group files (vs a bare directory read)"
}

const (
	ownBrokers       = 3
	ownWriteSlack    = time.Millisecond // the fixed part of the write bound
	ownWriteFactor   = 5.0              // the multiple of the raw 1 KiB write
	ownDeadline      = 45 * time.Second // the whole goal, except removing its files at the end
	ownCreateWorkers = 8
	ownTopic         = "bench-retention"
	ownCanary        = "bench-ret-expired"
	ownRetention     = 7 * 24 * time.Hour
)

func (o ownershipGoal) Run(ctx context.Context, env *Env) ([]Row, error) {
	if env.Duration > 0 && env.Duration < time.Second { // the quick test
		o.groups, o.files, o.writes = min(o.groups, 1000), min(o.files, 5000), min(o.writes, 5)
	}
	if o.groups <= 0 || o.files <= 0 || o.writes <= 0 {
		return nil, fmt.Errorf("bench: ownership-scale: scale %+v", o)
	}
	ctx, cancel := context.WithTimeout(ctx, ownDeadline)
	defer cancel()
	dir, err := env.ScratchDir(false, "kaas-ownership-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	where := "data dir on a disk file system"
	if IsTmpfs(dir) {
		where = "data dir on tmpfs: fsync costs nothing"
	}
	rows, err := o.assignment(ctx, dir, where)
	if err != nil {
		return rows, err
	}
	r, err := o.retention(ctx, dir, where)
	if err != nil {
		return rows, err
	}
	return append(rows, r), nil
}

const ownGoalName = "ownership-scale"

// assignment builds assignment.json as the controller does and times its
// durable write against a durable 1 KiB write in the same folder.
func (o ownershipGoal) assignment(ctx context.Context, dir, where string) ([]Row, error) {
	const g = ownGoalName
	now := time.Now()
	ids := make([]string, ownBrokers)
	for i := range ids {
		ids[i] = volume.BrokerName(int32(i))
	}
	all := func(string) bool { return true }
	groups := make(map[string][]string, ownBrokers)
	for i := range o.groups {
		name := fmt.Sprintf("bench-own-%05d", i)
		c, ok := route.Coordinator(name, ids, all)
		if !ok {
			return nil, fmt.Errorf("bench: no coordinator for %s", name)
		}
		groups[c] = append(groups[c], name)
	}
	obs := make(map[string]cluster.Observed, ownBrokers)
	for i, id := range ids {
		obs[id] = cluster.Observed{Health: cluster.Alive, Report: cluster.Report{
			ID: id, NodeID: int32(i), Host: "127.0.0.1", Port: 9092 + int32(i), State: cluster.StateRunning,
			Incarnation: "bench", Seq: 1, At: now, Groups: groups[id],
		}}
	}
	t0 := time.Now()
	a := cluster.Compute(cluster.Inputs{Epoch: 1, Me: ids[0], Now: now, Brokers: obs})
	compute := time.Since(t0)
	if a == nil || len(a.ConsumerGroups) != o.groups {
		n := 0
		if a != nil {
			n = len(a.ConsumerGroups)
		}
		return nil, fmt.Errorf("bench: Compute placed %d of %d groups explicitly", n, o.groups)
	}
	data, err := json.Marshal(a) // as the controller's runtime encodes it
	if err != nil {
		return nil, err
	}
	if _, err := cluster.DecodeAssignment(data); err != nil {
		return nil, err
	}
	empty := *a
	empty.ConsumerGroups = nil
	base, err := json.Marshal(&empty)
	if err != nil {
		return nil, err
	}

	path := volume.AssignmentPath(dir)
	folder := filepath.Dir(path)
	if err := os.MkdirAll(folder, 0o755); err != nil {
		return nil, err
	}
	rawPath := filepath.Join(folder, "bench-raw-1k.json")
	raw := make([]byte, smallFile)
	for i := range raw {
		raw[i] = 'x'
	}
	// One untimed write of each first (creates the files), then the timed
	// writes, interleaved so that both see the same state of the volume.
	if err := fsutil.WriteFile(rawPath, raw); err != nil {
		return nil, err
	}
	if err := fsutil.WriteFile(path, data); err != nil {
		return nil, err
	}
	var ours, ref, enc []time.Duration
	for range o.writes {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bench: assignment writes: %w", err)
		}
		t0 := time.Now()
		if err := fsutil.WriteFile(rawPath, raw); err != nil {
			return nil, err
		}
		ref = append(ref, time.Since(t0))
		t0 = time.Now()
		if data, err = json.Marshal(a); err != nil {
			return nil, err
		}
		enc = append(enc, time.Since(t0))
		t0 = time.Now()
		if err := fsutil.WriteFile(path, data); err != nil {
			return nil, err
		}
		ours = append(ours, time.Since(t0))
	}
	p50, p99 := percentile(ours, 0.5), percentile(ours, 0.99)
	rawP50, rawP99 := percentile(ref, 0.5), percentile(ref, 0.99)
	bound := ownWriteFactor + float64(ownWriteSlack)/float64(max(rawP50, time.Microsecond))
	size := float64(len(data))
	return []Row{
		Info(g, fmt.Sprintf("assignment.json size, %d groups on %d alive brokers vs the 1 KiB raw file", o.groups, ownBrokers), "bytes",
			size, smallFile, RefL,
			fmt.Sprintf("%.1f B/group (%d B without the group entries); every group an explicit entry from cluster.Compute (%s), no topics; json.Marshal as the controller, p50 %s",
				(size-float64(len(base)))/float64(o.groups), len(base), fmtDur(compute), fmtDur(percentile(enc, 0.5)))),
		AtMost(g, fmt.Sprintf("assignment.json durable write p50, %d groups, vs durable 1 KiB write", o.groups), "ms",
			ms(p50), ms(rawP50), RefL, bound,
			fmt.Sprintf("fsutil.WriteFile (temp, fsync, rename, fsync dir) of %d KB, %d writes interleaved with the 1 KiB one in the same folder; p99 %s (1 KiB: p50 %s, p99 %s); bound 1 ms + 5 × the 1 KiB write: the file is %.0f× larger, the 1 ms pays copying and flushing it, 5× absorbs fsync jitter; encoding not included; %s",
				len(data)>>10, o.writes, fmtDur(p99), fmtDur(rawP50), fmtDur(rawP99), size/smallFile, where)),
	}, nil
}

// retention creates o.files group files, times one ExpireOffsets pass over
// them and a bare directory read, and removes the files.
func (o ownershipGoal) retention(ctx context.Context, dir, where string) (Row, error) {
	const g = ownGoalName
	odir := volume.OffsetsDir(dir)
	defer os.RemoveAll(odir)
	if err := os.MkdirAll(odir, 0o755); err != nil {
		return Row{}, err
	}
	commitMs := time.Now().Add(-time.Hour).UnixMilli() // recent: nothing expires
	t0 := time.Now()
	if err := writeRetentionFiles(ctx, odir, o.files, commitMs); err != nil {
		return Row{}, err
	}
	created := time.Since(t0)
	// One more group, committed before the retention: the pass must expire
	// it, which shows that it read and decoded the files.
	canary := filepath.Join(odir, offsets.FileName(ownCanary))
	canaryData := groupFile(nil, ownCanary, 1, time.Now().Add(-ownRetention-24*time.Hour).UnixMilli())
	if err := os.WriteFile(canary, canaryData, 0o644); err != nil {
		return Row{}, err
	}

	t0 = time.Now()
	ents, err := os.ReadDir(odir)
	if err != nil {
		return Row{}, err
	}
	readDir := time.Since(t0)
	if len(ents) != o.files+1 {
		return Row{}, fmt.Errorf("bench: %d group files, want %d", len(ents), o.files+1)
	}
	// Reading every file, no decoding: what the pass cannot do without.
	t0 = time.Now()
	for i, e := range ents {
		if i%1024 == 0 && ctx.Err() != nil {
			return Row{}, fmt.Errorf("bench: reading group files: %w", ctx.Err())
		}
		if _, err := os.ReadFile(filepath.Join(odir, e.Name())); err != nil {
			return Row{}, err
		}
	}
	readAll := time.Since(t0)

	st, err := offsets.Open(offsets.Options{Dir: odir})
	if err != nil {
		return Row{}, err
	}
	defer st.Close()
	c := coord.New(coord.Config{Me: "kaas-0", Self: coord.Broker{ID: "kaas-0"}, Store: st,
		Standalone: true, Retention: ownRetention})
	t0 = time.Now()
	c.ExpireOffsets(ctx)
	pass := time.Since(t0)
	if err := ctx.Err(); err != nil {
		return Row{}, fmt.Errorf("bench: retention pass over %d files not done in time: %w", o.files, err)
	}
	if data, err := os.ReadFile(canary); err == nil && bytes.Equal(data, canaryData) {
		return Row{}, fmt.Errorf("bench: the retention pass left the expired group %s as it was: it did not check the files", ownCanary)
	}
	after, err := os.ReadDir(odir)
	if err != nil {
		return Row{}, err
	}
	kept := 0
	for _, e := range after {
		if e.Name() != filepath.Base(canary) {
			kept++
		}
	}
	if kept != o.files {
		return Row{}, fmt.Errorf("bench: %d entries besides the expired group after the retention pass, want the %d group files", kept, o.files)
	}
	return Info(g, fmt.Sprintf("offsets retention pass over %d group files vs os.ReadDir of the folder", o.files), "ms",
		ms(pass), ms(readDir), RefL,
		fmt.Sprintf("(*coord.Coordinator).ExpireOffsets, standalone, retention 7 days; every group committed 1 h ago and kept, plus 1 group past retention that the pass must expire (a check that it read the files); %.0f files/s; reading every file without decoding %s; files created without fsync in %s by %d goroutines, page cache warm; %s",
			float64(o.files+1)/pass.Seconds(), fmtDur(readAll), created.Round(time.Millisecond), ownCreateWorkers, where)), nil
}

func retentionGroup(i int) string { return fmt.Sprintf("bench-ret-%06d", i) }

// groupFile appends the group file of group, with one offset of ownTopic
// partition 0 committed at commitMs, in the format the offsets package
// writes (docs/offsets.md, "File format").
func groupFile(buf []byte, group string, offset, commitMs int64) []byte {
	return fmt.Appendf(buf, `{"group":%q,"offsets":{"%s/0":%d},"details":{"%s/0":[-1,%d,-1]},"fence":{"controller_epoch":0,"assignment_version":0}}`+"\n",
		group, ownTopic, offset, ownTopic, commitMs)
}

// writeRetentionFiles writes n group files in the format the offsets
// package writes (docs/offsets.md), one offset each committed at commitMs,
// without fsync.
func writeRetentionFiles(ctx context.Context, dir string, n int, commitMs int64) error {
	errs := make(chan error, ownCreateWorkers)
	var wg sync.WaitGroup
	for w := range ownCreateWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for i, k := w, 0; i < n; i, k = i+ownCreateWorkers, k+1 {
				if k%64 == 0 && ctx.Err() != nil {
					errs <- fmt.Errorf("bench: creating group files: %w", ctx.Err())
					return
				}
				group := retentionGroup(i)
				buf = groupFile(buf[:0], group, int64(i), commitMs)
				if err := os.WriteFile(filepath.Join(dir, offsets.FileName(group)), buf, 0o644); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
