package txn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kaas-dev/kaas/internal/fsutil"
	"github.com/kaas-dev/kaas/internal/offsets"
)

// Errors returned to the broker, which maps them to Kafka codes.
var (
	ErrNotCoordinator         = errors.New("txn: not the coordinator of this transactional id")
	ErrNotAvailable           = errors.New("txn: coordinator not available")
	ErrConcurrent             = errors.New("txn: a transaction of this id is completing")
	ErrProducerFenced         = errors.New("txn: producer fenced by a newer epoch")
	ErrInvalidMapping         = errors.New("txn: producer id does not match the transactional id")
	ErrInvalidState           = errors.New("txn: invalid transaction state")
	ErrInvalidTimeout         = errors.New("txn: invalid transaction timeout")
	ErrUnknownTransactionalID = errors.New("txn: unknown transactional id")
)

// Markers writes transaction markers. Implementations retry until every
// target accepted the marker or ctx ends.
type Markers interface {
	// Partitions writes a commit or abort marker for producer pid at epoch
	// into every partition (each partition's leader appends and syncs it).
	Partitions(ctx context.Context, pid int64, epoch int16, commit bool, tps []TP) error
	// Groups makes every group's staged offsets of pid committed or dropped
	// (each group's coordinator applies it).
	Groups(ctx context.Context, pid int64, epoch int16, commit bool, groups []string) error
}

// Config configures a Coordinator.
type Config struct {
	Me     string
	Dir    string // <data>/__cluster/transactions
	Logger *slog.Logger
	// Grant is the one ownership decision for a transactional id: from one
	// snapshot of the assignment in force, whether this broker coordinates
	// it and the stamp its writes carry. It is evaluated again under the
	// id's lock immediately before every write, so a write never carries a
	// stamp newer than the assignment that granted it.
	Grant         func(transactionalID string) (offsets.Fence, bool)
	NewProducerID func() (int64, error)
	Markers       Markers
	MaxTimeout    time.Duration    // transaction.max.timeout.ms; default 15 min
	Now           func() time.Time // nil: time.Now
	// Writes counts the writes in flight by the assignment they were
	// granted under (the liveness reports carry the oldest); nil: none.
	Writes *fsutil.Writes
}

// Coordinator holds the transactional ids this broker coordinates.
type Coordinator struct {
	cfg Config
	log *slog.Logger

	mu  sync.Mutex // guards ids; taken before any entry.mu
	ids map[string]*entry

	// beforeSave, in tests, runs after an operation's ownership check and
	// before its write.
	beforeSave func(id string)
}

// entry is one resident transactional id. Its mu is held for the whole of
// an operation, markers included, so operations on one id are serialised.
type entry struct {
	id   string
	path string
	mu   sync.Mutex
	rec  *Record        // nil until loaded or created
	fi   fsutil.Version // the file as last read or written
	gone bool           // evicted: look again
}

// New returns a Coordinator.
func New(cfg Config) (*Coordinator, error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("txn: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = 15 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Coordinator{cfg: cfg, log: cfg.Logger, ids: map[string]*entry{}}, nil
}

// owns reports whether this broker coordinates id now.
func (c *Coordinator) owns(id string) bool {
	_, ok := c.cfg.Grant(id)
	return ok
}

// lock returns the locked entry of an owned id, loading its file.
func (c *Coordinator) lock(id string) (*entry, error) {
	if id == "" {
		return nil, ErrUnknownTransactionalID
	}
	if !c.owns(id) {
		return nil, ErrNotCoordinator
	}
	for {
		c.mu.Lock()
		e, ok := c.ids[id]
		if !ok {
			e = &entry{id: id, path: filepath.Join(c.cfg.Dir, offsets.FileName(id))}
			c.ids[id] = e
		}
		c.mu.Unlock()
		e.mu.Lock()
		if e.gone {
			e.mu.Unlock()
			continue
		}
		if err := c.refresh(e); err != nil {
			e.mu.Unlock()
			return nil, err
		}
		return e, nil
	}
}

// refresh reads the file when it changed since we last read or wrote it.
func (c *Coordinator) refresh(e *entry) error {
	fi, err := os.Stat(e.path)
	if errors.Is(err, fs.ErrNotExist) {
		e.rec, e.fi = nil, fsutil.Version{}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotAvailable, err)
	}
	if e.fi.Same(fi) {
		return nil
	}
	data, err := os.ReadFile(e.path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotAvailable, err)
	}
	rec, err := decodeRecord(data)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotAvailable, e.id, err)
	}
	e.rec, e.fi = rec, fsutil.VersionOf(fi)
	return nil
}

// save writes rec durably, unless the file on disk carries a newer fence
// (this broker lost the id). On success e.rec becomes rec.
func (c *Coordinator) save(e *entry, rec *Record) error {
	if err := c.refresh(e); err != nil {
		return err
	}
	if c.beforeSave != nil {
		c.beforeSave(e.id)
	}
	f, ok := c.cfg.Grant(e.id)
	if !ok || (e.rec != nil && f.Less(e.rec.Fence.offsets())) {
		return ErrNotCoordinator
	}
	if e.rec != nil && !CanTransition(e.rec.State, rec.State) {
		c.log.Error("illegal transaction state change refused", "transactional_id", e.id, "from", e.rec.State, "to", rec.State)
		return ErrInvalidState
	}
	// Counted in flight before the last check: a broker gaining the id
	// waits for it (fsutil.Writes).
	end := c.cfg.Writes.Begin(fsutil.Stamp{Epoch: f.ControllerEpoch, Version: f.AssignmentVersion})
	defer end()
	if again, ok := c.cfg.Grant(e.id); !ok || again.Less(f) {
		return ErrNotCoordinator
	}
	rec.Fence = fenceOf(f)
	rec.UpdatedAt = c.cfg.Now().UTC()
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("txn: encode %s: %w", e.id, err)
	}
	if err := fsutil.WriteFile(e.path, data); err != nil {
		return fmt.Errorf("%w: write %s: %w", ErrNotAvailable, e.id, err)
	}
	fi, err := os.Stat(e.path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotAvailable, err)
	}
	e.rec, e.fi = rec, fsutil.VersionOf(fi)
	return nil
}

// InitResult is InitProducerId's answer.
type InitResult struct {
	ProducerID    int64
	ProducerEpoch int16
}

// InitProducerID starts a session of a transactional id: a transaction the
// previous session left open is aborted (or a prepared one completed) and
// the epoch bumped, which fences the previous producer. pid/epoch are the
// caller's current ones (KIP-360, v3+), or -1.
func (c *Coordinator) InitProducerID(ctx context.Context, id string, timeout time.Duration, pid int64, epoch int16) (InitResult, error) {
	if timeout <= 0 || timeout > c.cfg.MaxTimeout {
		return InitResult{}, ErrInvalidTimeout
	}
	e, err := c.lock(id)
	if err != nil {
		return InitResult{}, err
	}
	defer e.mu.Unlock()
	now := c.cfg.Now().UTC()
	if e.rec == nil {
		p, err := c.cfg.NewProducerID()
		if err != nil {
			return InitResult{}, fmt.Errorf("%w: %w", ErrNotAvailable, err)
		}
		rec := &Record{TransactionalID: id, ProducerID: p, ProducerEpoch: 0, TimeoutMs: int32(timeout.Milliseconds()), State: Empty, StartedAt: now}
		if err := c.save(e, rec); err != nil {
			return InitResult{}, err
		}
		c.log.Info("transactional id initialised", "transactional_id", id, "producer_id", p, "epoch", 0)
		return InitResult{ProducerID: p, ProducerEpoch: 0}, nil
	}
	if pid >= 0 && (pid != e.rec.ProducerID || epoch != e.rec.ProducerEpoch) {
		// KIP-360: a producer that still thinks it owns an older session.
		if pid == e.rec.ProducerID && epoch < e.rec.ProducerEpoch {
			return InitResult{}, ErrProducerFenced
		}
		if pid != e.rec.ProducerID {
			return InitResult{}, ErrProducerFenced
		}
	}
	// Finish what the previous session left: roll a prepared transaction
	// forward, abort an open one at a bumped epoch.
	if err := c.finish(ctx, e, true); err != nil {
		return InitResult{}, err
	}
	rec := e.rec.clone()
	if rec.ProducerEpoch >= math.MaxInt16-1 {
		p, err := c.cfg.NewProducerID()
		if err != nil {
			return InitResult{}, fmt.Errorf("%w: %w", ErrNotAvailable, err)
		}
		rec.ProducerID, rec.ProducerEpoch = p, 0
	} else {
		rec.ProducerEpoch++
	}
	rec.TimeoutMs = int32(timeout.Milliseconds())
	rec.State, rec.Partitions, rec.Groups = Empty, nil, nil
	if err := c.save(e, rec); err != nil {
		return InitResult{}, err
	}
	c.log.Info("transactional id re-initialised; previous producer fenced", "transactional_id", id,
		"producer_id", rec.ProducerID, "epoch", rec.ProducerEpoch)
	return InitResult{ProducerID: rec.ProducerID, ProducerEpoch: rec.ProducerEpoch}, nil
}

// finish completes a prepared transaction, and with abortOpen also aborts
// an open one (bumping the epoch so the old producer is fenced). Called
// with e.mu held.
func (c *Coordinator) finish(ctx context.Context, e *entry, abortOpen bool) error {
	switch e.rec.State {
	case PrepareCommit, PrepareAbort:
		return c.complete(ctx, e)
	case Ongoing:
		if !abortOpen {
			return nil
		}
		rec := e.rec.clone()
		if rec.ProducerEpoch < math.MaxInt16-1 {
			rec.ProducerEpoch++
		}
		rec.State = PrepareAbort
		if err := c.save(e, rec); err != nil {
			return err
		}
		c.log.Info("aborting the open transaction", "transactional_id", e.id, "producer_id", rec.ProducerID, "epoch", rec.ProducerEpoch)
		return c.complete(ctx, e)
	}
	return nil
}

// complete writes the markers of a prepared transaction and records its
// completion. Called with e.mu held; e.rec is PrepareCommit or PrepareAbort.
func (c *Coordinator) complete(ctx context.Context, e *entry) error {
	rec := e.rec
	commit := rec.State == PrepareCommit
	if len(rec.Partitions) > 0 {
		if err := c.cfg.Markers.Partitions(ctx, rec.ProducerID, rec.ProducerEpoch, commit, rec.Partitions); err != nil {
			return fmt.Errorf("%w: markers for %s: %w", ErrConcurrent, e.id, err)
		}
	}
	if len(rec.Groups) > 0 {
		if err := c.cfg.Markers.Groups(ctx, rec.ProducerID, rec.ProducerEpoch, commit, rec.Groups); err != nil {
			return fmt.Errorf("%w: group markers for %s: %w", ErrConcurrent, e.id, err)
		}
	}
	done := rec.clone()
	done.State = CompleteAbort
	if commit {
		done.State = CompleteCommit
	}
	done.Partitions, done.Groups = nil, nil
	if err := c.save(e, done); err != nil {
		return err
	}
	c.log.Info("transaction complete", "transactional_id", e.id, "producer_id", done.ProducerID,
		"epoch", done.ProducerEpoch, "state", done.State, "partitions", len(rec.Partitions), "groups", len(rec.Groups))
	return nil
}

// check validates the producer of a request against the record.
func check(rec *Record, pid int64, epoch int16) error {
	switch {
	case rec == nil:
		return ErrInvalidMapping
	case pid != rec.ProducerID:
		return ErrInvalidMapping
	case epoch != rec.ProducerEpoch:
		// Older or newer alike, as Kafka answers (PRODUCER_FENCED).
		return ErrProducerFenced
	}
	return nil
}

// begin moves the id into Ongoing (a new transaction) when needed, applying
// mutate, and saves. Called with e.mu held.
func (c *Coordinator) begin(e *entry, pid int64, epoch int16, mutate func(*Record)) error {
	if err := check(e.rec, pid, epoch); err != nil {
		return err
	}
	switch e.rec.State {
	case PrepareCommit, PrepareAbort:
		return ErrConcurrent
	}
	rec := e.rec.clone()
	if rec.State != Ongoing {
		rec.State, rec.Partitions, rec.Groups = Ongoing, nil, nil
		rec.StartedAt = c.cfg.Now().UTC()
	}
	before := len(rec.Partitions) + len(rec.Groups)
	mutate(rec)
	if e.rec.State == Ongoing && len(rec.Partitions)+len(rec.Groups) == before {
		return nil // nothing new: no write
	}
	return c.save(e, rec)
}

// AddPartitions adds partitions to the producer's transaction.
func (c *Coordinator) AddPartitions(ctx context.Context, id string, pid int64, epoch int16, tps []TP) error {
	e, err := c.lock(id)
	if err != nil {
		return err
	}
	defer e.mu.Unlock()
	return c.begin(e, pid, epoch, func(r *Record) { r.addPartitions(tps) })
}

// Verify reports whether every partition is in the producer's open
// transaction (AddPartitionsToTxn v4+ verify-only).
func (c *Coordinator) Verify(id string, pid int64, epoch int16, tps []TP) (map[TP]bool, error) {
	e, err := c.lock(id)
	if err != nil {
		return nil, err
	}
	defer e.mu.Unlock()
	if err := check(e.rec, pid, epoch); err != nil {
		return nil, err
	}
	in := map[TP]bool{}
	if e.rec.State == Ongoing {
		for _, tp := range e.rec.Partitions {
			in[tp] = true
		}
	}
	out := map[TP]bool{}
	for _, tp := range tps {
		out[tp] = in[tp]
	}
	return out, nil
}

// AddOffsets adds a group to the producer's transaction (its offsets will
// be committed or dropped with it).
func (c *Coordinator) AddOffsets(ctx context.Context, id string, pid int64, epoch int16, group string) error {
	e, err := c.lock(id)
	if err != nil {
		return err
	}
	defer e.mu.Unlock()
	return c.begin(e, pid, epoch, func(r *Record) { r.addGroup(group) })
}

// EndTxn commits or aborts the producer's transaction: the decision is made
// durable first, then markers go to every partition and group, then the
// completion is recorded. A retried EndTxn of a transaction that already
// completed the same way succeeds; one still completing is driven forward.
func (c *Coordinator) EndTxn(ctx context.Context, id string, pid int64, epoch int16, commit bool) error {
	e, err := c.lock(id)
	if err != nil {
		return err
	}
	defer e.mu.Unlock()
	if err := check(e.rec, pid, epoch); err != nil {
		return err
	}
	want := PrepareAbort
	if commit {
		want = PrepareCommit
	}
	switch e.rec.State {
	case Ongoing:
		rec := e.rec.clone()
		rec.State = want
		if err := c.save(e, rec); err != nil {
			return err
		}
		return c.complete(ctx, e)
	case PrepareCommit, PrepareAbort:
		if e.rec.State != want {
			return ErrInvalidState
		}
		return c.complete(ctx, e)
	case CompleteCommit:
		if commit {
			return nil
		}
	case CompleteAbort:
		if !commit {
			return nil
		}
	case Empty:
		if !commit {
			return nil // aborting nothing is fine
		}
	}
	return ErrInvalidState
}

// Sweep aborts transactions past their timeout (bumping the epoch, which
// fences their producer), completes prepared ones that a previous
// coordinator left, and forgets ids this broker no longer coordinates.
// withDisk also loads every owned id found on the volume (a coordinator
// that died may have left work).
func (c *Coordinator) Sweep(ctx context.Context, withDisk bool) {
	if withDisk {
		ents, err := os.ReadDir(c.cfg.Dir)
		if err == nil {
			for _, de := range ents {
				name := de.Name()
				if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
					continue
				}
				id, ok := offsets.GroupFromFileName(name)
				if !ok {
					rec, err := readRecord(filepath.Join(c.cfg.Dir, name))
					if err != nil {
						continue
					}
					id = rec.TransactionalID
				}
				if c.owns(id) {
					c.mu.Lock()
					if _, ok := c.ids[id]; !ok {
						c.ids[id] = &entry{id: id, path: filepath.Join(c.cfg.Dir, offsets.FileName(id))}
					}
					c.mu.Unlock()
				}
			}
		}
	}
	c.mu.Lock()
	var resident []*entry
	for id, e := range c.ids {
		if !c.owns(id) {
			delete(c.ids, id)
			e.mu.Lock()
			e.gone = true
			e.mu.Unlock()
			continue
		}
		resident = append(resident, e)
	}
	c.mu.Unlock()
	now := c.cfg.Now()
	for _, e := range resident {
		e.mu.Lock()
		if e.gone || c.refresh(e) != nil || e.rec == nil {
			e.mu.Unlock()
			continue
		}
		var err error
		switch e.rec.State {
		case PrepareCommit, PrepareAbort:
			c.log.Info("completing a prepared transaction", "transactional_id", e.id, "state", e.rec.State)
			err = c.complete(ctx, e)
		case Ongoing:
			if now.Sub(e.rec.StartedAt) > time.Duration(e.rec.TimeoutMs)*time.Millisecond {
				c.log.Info("transaction timed out; aborting", "transactional_id", e.id,
					"timeout_ms", e.rec.TimeoutMs, "producer_id", e.rec.ProducerID)
				err = c.finish(ctx, e, true)
			}
		}
		if err != nil {
			c.log.Warn("transaction sweep", "transactional_id", e.id, "err", err)
		}
		e.mu.Unlock()
	}
}

func readRecord(path string) (*Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return decodeRecord(data)
}

// Describe returns the records of ids (nil for unknown ones); ErrNotCoordinator
// per id is reported through the map of errors.
func (c *Coordinator) Describe(ids []string) (map[string]*Record, map[string]error) {
	recs, errs := map[string]*Record{}, map[string]error{}
	for _, id := range ids {
		e, err := c.lock(id)
		if err != nil {
			errs[id] = err
			continue
		}
		if e.rec == nil {
			errs[id] = ErrUnknownTransactionalID
		} else {
			recs[id] = e.rec.clone()
		}
		e.mu.Unlock()
	}
	return recs, errs
}

// List returns the records of every id this broker coordinates.
func (c *Coordinator) List() []*Record {
	ents, _ := os.ReadDir(c.cfg.Dir)
	var out []*Record
	for _, de := range ents {
		name := de.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
			continue
		}
		rec, err := readRecord(filepath.Join(c.cfg.Dir, name))
		if err != nil || !c.owns(rec.TransactionalID) {
			continue
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TransactionalID < out[j].TransactionalID })
	return out
}
