package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kaas-dev/kaas/internal/volume"
)

// Election is what an Elector knows after a Tick.
type Election struct {
	Holder string // the current controller, "" when none is known
	Epoch  int64  // the highest controller epoch known (never decreases)
	Leader bool   // this broker holds the role at Epoch
}

// Elector is a controller election backend: exactly one holder at a time,
// and an epoch that rises on every change of holder.
type Elector interface {
	// Tick takes or keeps the role when it can. The runtime calls it about
	// every ElectionInterval. It never blocks longer than one I/O round.
	Tick(ctx context.Context, now time.Time) (Election, error)
	// Resign gives the role up so that another broker can take it at once.
	Resign(ctx context.Context) error
}

// FileElector elects through the shared volume alone.
//
// Records live in <data>/__cluster/controller/epoch-<20-digit epoch>.json,
// content {"holder":"kaas-0","epoch":3,"seq":812,"resigned":false}. Taking
// epoch N+1 means exclusively creating its file (atomic on the volume), so
// two brokers can never both win one epoch. The holder renews by rewriting
// its own record (seq+1) every tick. Another broker takes over when it has
// seen no renewal for TTL by its own clock (no clock is compared between
// machines), when the record says resigned, when the holder's broker report
// says stopped, or when the holder is this broker's own earlier incarnation.
//
// A holder that sees a higher epoch steps down. A holder that was paused
// (SIGSTOP, a long GC, a stalled volume) for longer than TTL may have been
// replaced; it steps down unless a fresh listing shows its epoch is still
// the highest. Brokers refuse assignments whose controllerEpoch is below the
// highest epoch they know, so a deposed controller's late write is ignored
// by every broker that has seen the new epoch; the new controller's first
// write carries the higher epoch and wins everywhere.
//
// On network volumes the exclusive create and the rename must be atomic
// (NFSv4 and most RWX CSI drivers provide both). Listing a directory may be
// served from an attribute cache; kaas reads the record files themselves,
// which close-to-open consistency revalidates.
type FileElector struct {
	v       Volume
	dir, me string
	ttl     time.Duration
	log     *slog.Logger
	// stopped reports whether a broker's own report says it has stopped.
	stopped func(id string) bool
	// holding judges the holder of epoch from the network when it can (ok):
	// it holds the role while reports of it arrive within the lease and do
	// not say it stopped leading at that epoch. Its record not changing is
	// then no reason to take over (a caching volume shows renewals late).
	// nil, or !ok: the record alone is the judge.
	holding func(id string, epoch int64, now time.Time) (holds, ok bool)

	// Owned by the runtime loop (Tick is never called concurrently).
	seen      electionRecord
	seenAt    time.Time
	leading   bool
	epoch     int64 // my epoch while leading
	seq       int64
	lastRenew time.Time
	known     int64
}

type electionRecord struct {
	Holder   string `json:"holder"`
	Epoch    int64  `json:"epoch"`
	Seq      int64  `json:"seq"`
	Resigned bool   `json:"resigned,omitempty"`
}

// NewFileElector returns the default elector over <dataDir>/__cluster/controller
// (stopped and log may be nil).
func NewFileElector(dataDir, me string, ttl time.Duration, stopped func(string) bool, log *slog.Logger) (*FileElector, error) {
	return newFileElector(OS{}, dataDir, me, ttl, stopped, log)
}

func newFileElector(v Volume, dataDir, me string, ttl time.Duration, stopped func(string) bool, log *slog.Logger) (*FileElector, error) {
	dir := volume.ControllerDir(dataDir)
	if err := v.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("election: %w", err)
	}
	if stopped == nil {
		stopped = func(string) bool { return false }
	}
	if log == nil {
		log = slog.Default()
	}
	return &FileElector{v: v, dir: dir, me: me, ttl: ttl, log: log, stopped: stopped}, nil
}

func (e *FileElector) path(epoch int64) string {
	return filepath.Join(e.dir, fmt.Sprintf("epoch-%020d.json", epoch))
}

// highest returns the highest epoch record on disk (epoch 0 when none).
func (e *FileElector) highest() (electionRecord, error) {
	names, err := e.v.ReadDir(e.dir)
	if err != nil {
		return electionRecord{}, fmt.Errorf("election: list: %w", err)
	}
	var top int64
	for _, name := range names {
		n, ok := strings.CutPrefix(name, "epoch-")
		if !ok {
			continue
		}
		n, ok = strings.CutSuffix(n, ".json")
		if !ok {
			continue
		}
		if v, err := strconv.ParseInt(n, 10, 64); err == nil && v > top {
			top = v
		}
	}
	if top == 0 {
		return electionRecord{}, nil
	}
	data, err := e.v.ReadFile(e.path(top))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) { // pruned or replaced under us; next tick
			return electionRecord{Epoch: top}, nil
		}
		return electionRecord{}, fmt.Errorf("election: read epoch %d: %w", top, err)
	}
	var r electionRecord
	if err := json.Unmarshal(data, &r); err != nil || r.Epoch != top {
		// A torn or foreign record still proves the epoch is taken.
		return electionRecord{Epoch: top}, nil
	}
	return r, nil
}

// Tick implements Elector.
func (e *FileElector) Tick(ctx context.Context, now time.Time) (Election, error) {
	top, err := e.highest()
	if err != nil {
		if e.leading && now.Sub(e.lastRenew) > e.ttl {
			e.stepDown("volume unreadable for longer than the lease", top.Epoch)
		}
		return e.status(top), err
	}
	if top.Epoch > e.known {
		e.known = top.Epoch
	}
	if e.leading {
		if top.Epoch > e.epoch {
			e.stepDown("a higher epoch exists", top.Epoch)
			return e.status(top), nil
		}
		e.seq++
		rec := electionRecord{Holder: e.me, Epoch: e.epoch, Seq: e.seq}
		data, _ := json.Marshal(rec)
		if err := e.v.WriteFile(e.path(e.epoch), data); err != nil {
			if now.Sub(e.lastRenew) > e.ttl {
				e.stepDown("lease renewal failing for longer than the lease", e.epoch)
			}
			return e.status(top), fmt.Errorf("election: renew: %w", err)
		}
		e.lastRenew = now
		e.prune()
		return e.status(rec), nil
	}
	if top != e.seen {
		e.seen, e.seenAt = top, now
	}
	reason := ""
	switch {
	case top.Epoch == 0:
		reason = "no controller yet"
	case top.Holder == "":
		if now.Sub(e.seenAt) >= e.ttl {
			reason = "unreadable controller record"
		}
	case top.Resigned:
		reason = "controller resigned"
	case top.Holder == e.me:
		reason = "record held by this broker's earlier incarnation"
	case e.stopped(top.Holder):
		reason = "controller stopped (reported stopped, or nothing listens at its cluster address)"
	case e.holding != nil:
		if holds, ok := e.holding(top.Holder, top.Epoch, now); ok {
			if !holds {
				reason = "controller silent on the network for the lease, or no longer leading"
			}
		} else if now.Sub(e.seenAt) >= e.ttl {
			reason = "controller lease expired"
		}
	case now.Sub(e.seenAt) >= e.ttl:
		reason = "controller lease expired"
	}
	if reason == "" {
		return e.status(top), nil
	}
	next := top.Epoch + 1
	rec := electionRecord{Holder: e.me, Epoch: next}
	data, _ := json.Marshal(rec)
	if err := e.v.CreateExclusive(e.path(next), data); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return e.status(top), nil // another broker won this epoch
		}
		return e.status(top), fmt.Errorf("election: claim epoch %d: %w", next, err)
	}
	e.leading, e.epoch, e.seq, e.lastRenew, e.known = true, next, 0, now, next
	e.log.Info("elected controller", "epoch", next, "previous", top.Holder, "why", reason)
	return e.status(rec), nil
}

func (e *FileElector) status(top electionRecord) Election {
	if e.leading {
		return Election{Holder: e.me, Epoch: e.epoch, Leader: true}
	}
	h := top.Holder
	if top.Resigned {
		h = ""
	}
	return Election{Holder: h, Epoch: e.known}
}

func (e *FileElector) stepDown(why string, epoch int64) {
	e.log.Warn("stepping down as controller", "epoch", e.epoch, "seen_epoch", epoch, "why", why)
	e.leading = false
	e.seen, e.seenAt = electionRecord{}, time.Time{}
}

// prune removes records more than a few epochs old (best effort).
func (e *FileElector) prune() {
	for ep := e.epoch - 4; ep > 0 && ep >= e.epoch-8; ep-- {
		_ = e.v.Remove(e.path(ep))
	}
}

// Resign implements Elector.
func (e *FileElector) Resign(context.Context) error {
	if !e.leading {
		return nil
	}
	e.leading = false
	rec := electionRecord{Holder: e.me, Epoch: e.epoch, Seq: e.seq + 1, Resigned: true}
	data, _ := json.Marshal(rec)
	if err := e.v.WriteFile(e.path(e.epoch), data); err != nil {
		return fmt.Errorf("election: resign: %w", err)
	}
	e.log.Info("resigned as controller", "epoch", e.epoch)
	return nil
}
