package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaas-dev/kaas/internal/cgroup"
	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/groupconfig"
	"github.com/kaas-dev/kaas/internal/metrics"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/volume"
)

// Errors returned to the broker, which maps them to Kafka codes.
var (
	ErrNotCoordinator       = errors.New("coord: not the coordinator of this group")
	ErrNotAvailable         = errors.New("coord: coordinator not available")
	ErrInvalidGroupID       = errors.New("coord: invalid group id")
	ErrGroupNotFound        = errors.New("coord: group not found")
	ErrNonEmptyGroup        = errors.New("coord: group has members")
	ErrIllegalGeneration    = errors.New("coord: illegal generation")
	ErrSubscribedToTopic    = errors.New("coord: group subscribed to topic")
	ErrCoordinatorLoadError = errors.New("coord: offsets unavailable")
	// ErrLoadInProgress: the group moved here and a broker that may still
	// act on an earlier assignment has not yet applied the move
	// (COORDINATOR_LOAD_IN_PROGRESS: the client retries here).
	ErrLoadInProgress = errors.New("coord: group moving here, previous owner not yet released")
)

// CodeError carries a Kafka error code decided by the group state machine.
type CodeError group.Code

func (c CodeError) Error() string { return "coord: group error " + group.Code(c).String() }

// Config configures a Coordinator.
type Config struct {
	Me        string // this broker's id
	Self      Broker // this broker, for the bootstrap source
	Store     *offsets.Store
	Logger    *slog.Logger
	Retention time.Duration    // offsets retention (KIP-211); default 7 days
	Now       func() time.Time // nil: time.Now
	// Standalone: no cluster runtime will ever swap the source; the local
	// source serves clients.
	Standalone bool
	// Group configures every group's state machine.
	Group group.Config
	// Consumer configures every consumer (KIP-848) group's state machine.
	Consumer cgroup.Config
	// GroupConfigs holds the configs set on single groups (Kafka's GROUP
	// config resource), applied at each ConsumerGroupHeartbeat; nil: none.
	GroupConfigs interface {
		Overrides(group string) groupconfig.Overrides
	}
	// Fresh reports whether this broker's view of the assignment is recent
	// enough to act on: its liveness report and an assignment poll after it
	// succeeded within the bound that keeps the controller from having
	// declared it dead (cluster.Runtime.Fresh). A broker that is not fresh
	// (frozen, cut off from the volume) answers NOT_COORDINATOR and writes
	// nothing. nil: always fresh.
	Fresh func() bool
	// Settled reports whether every broker that may still act on an
	// assignment older than a (every row of the newest assignment that is
	// not dead) has applied a or a newer one, and has no write granted
	// under an older one in flight (cluster.Runtime.Settled). A group that
	// moved here is served only once every assignment that routes it
	// elsewhere is settled. lapsed: a was applied here SettleTimeout ago;
	// a broker that has not applied it by then is no longer Fresh and
	// writes nothing new, so only its writes in flight are waited for.
	// nil: always settled.
	Settled func(a *cluster.Assignment, lapsed bool) bool
	// SettleTimeout: see Settled. 0: never lapsed.
	SettleTimeout time.Duration
	// Metrics records group loads and moves; nil records nothing.
	Metrics *metrics.Broker
}

// Coordinator holds the groups this broker coordinates.
type Coordinator struct {
	cfg      Config
	log      *slog.Logger
	own      *Ownership
	store    *offsets.Store
	ownStore bool // opened by OpenStandalone: Close closes it

	mu     sync.Mutex // guards groups, table and recent; taken before any shell.mu
	groups map[string]*shell
	table  *Table // the assignment in force, nil before the first
	// recent holds the assignments some broker may still act on, oldest
	// first, the newest last (== table): trimmed from the front as they
	// settle. Before the first applied assignment is settled it starts with
	// an unknown one (a Table with no assignment): what other brokers act on
	// when this one starts is not known, so it serves no group until they
	// have applied what it applied. unsettled mirrors len(recent) > 1.
	recent    []*Table
	unsettled atomic.Bool

	// topicsFn returns the topics consumer groups assign (SetTopics).
	topicsFn atomic.Pointer[func() *cgroup.Image]
	// closed: Close began; deadline timers do nothing.
	closed atomic.Bool

	// bg counts the goroutines that deliver answers held behind membership
	// writes; Close waits for them.
	bg sync.WaitGroup

	// beforeWrite, in tests, runs after a request's ownership check and
	// before its write or read reaches the store ("membership": with the
	// group's shell locked, before a membership write is queued; "load":
	// before a group's durable state is read).
	beforeWrite func(op, group string)
}

// shell is one resident group. Lock order: Coordinator.mu, then shell.mu.
type shell struct {
	id string

	mu         sync.Mutex // guards the fields below
	lastCommit time.Time
	emptySince time.Time
	gone       bool              // unloaded: a caller holding this shell must look again
	loaded     bool              // the durable state was read from the group's file (lockLoaded)
	member     *membership       // the classic protocol's state machine
	consumer   *consumerGroup    // the consumer protocol's (KIP-848)
	info       offsets.Retention // the retention data last queued for the file
	infoSet    bool
	infoGen    int32 // the generation and emptiness info was last computed at
	infoEmpty  bool
}

// OpenStandalone opens the offsets store of a broker that runs alone on
// dataDir and returns a coordinator over it that serves every group (the
// local source is the real one) and owns the store: Close closes it.
// cfg.Store and cfg.Standalone are set here.
func OpenStandalone(dataDir string, cfg Config) (*Coordinator, error) {
	st, err := offsets.Open(offsets.Options{Dir: volume.OffsetsDir(dataDir), Logger: cfg.Logger, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	cfg.Store, cfg.Standalone = st, true
	c := New(cfg)
	c.ownStore = true
	return c, nil
}

// Close closes the offsets store when this coordinator opened it
// (OpenStandalone); a store given in Config is its giver's to close.
func (c *Coordinator) Close() error {
	// Deadline timers fire no more: a firing that already holds its
	// group's lock has queued its write (waited for below) when the lock
	// is taken here.
	c.closed.Store(true)
	c.mu.Lock()
	shells := make([]*shell, 0, len(c.groups))
	for _, s := range c.groups {
		shells = append(shells, s)
	}
	c.mu.Unlock()
	for _, s := range shells {
		s.mu.Lock()
		if s.consumer != nil {
			s.consumer.stop()
		}
		s.mu.Unlock()
	}
	c.bg.Wait()
	if !c.ownStore {
		return nil
	}
	return c.store.Close()
}

// ConsumerDefaults are the broker's settings for consumer (KIP-848)
// groups, Kafka's defaults filled in.
func (c *Coordinator) ConsumerDefaults() cgroup.Config { return c.cfg.Consumer }

// New returns a Coordinator with the permissive bootstrap source.
func New(cfg Config) *Coordinator {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 7 * 24 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Consumer = cfg.Consumer.WithDefaults()
	cfg.Group = cfg.Group.WithDefaults()
	return &Coordinator{
		cfg: cfg, log: cfg.Logger, store: cfg.Store,
		own:    NewOwnership(cfg.Me, Local{Self: cfg.Self, Standalone: cfg.Standalone}),
		groups: map[string]*shell{},
	}
}

// Ownership is the ownership function this coordinator uses.
func (c *Coordinator) Ownership() *Ownership { return c.own }

// Serving reports whether the coordinator may answer client traffic: never
// on the bootstrap source of a clustered broker (trap 10).
func (c *Coordinator) Serving() bool { return c.own.Source().Serving() }

// FindGroup returns the coordinator of group.
func (c *Coordinator) FindGroup(group string) (Broker, error) {
	if !c.Serving() {
		return Broker{}, ErrNotAvailable
	}
	b, ok := c.own.Source().Group(group)
	if !ok {
		return Broker{}, ErrNotAvailable
	}
	return b, nil
}

// FindTxn returns the coordinator of a transactional id.
func (c *Coordinator) FindTxn(id string) (Broker, error) {
	if !c.Serving() {
		return Broker{}, ErrNotAvailable
	}
	b, ok := c.own.Source().Txn(id)
	if !ok {
		return Broker{}, ErrNotAvailable
	}
	return b, nil
}

// check validates a group id and ownership against the source in force. A
// group that moved here and is not yet released by the brokers acting on
// older assignments is waited for (a few hundred milliseconds: one poll and
// one report of each; at most SettleTimeout), so that a client sees the
// move as a slower answer rather than an error.
func (c *Coordinator) check(group string) error {
	if group == "" {
		return ErrInvalidGroupID
	}
	_, err := c.grant(group)
	if errors.Is(err, ErrLoadInProgress) {
		err = c.awaitRelease(group)
	}
	return err
}

// awaitRelease polls grant until the group is released, or SettleTimeout
// (plus a margin) has passed: then COORDINATOR_LOAD_IN_PROGRESS.
func (c *Coordinator) awaitRelease(group string) error {
	wait := time.NewTimer(c.cfg.SettleTimeout + 100*time.Millisecond)
	defer wait.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-wait.C:
			_, err := c.grant(group)
			return err
		case <-tick.C:
			if _, err := c.grant(group); !errors.Is(err, ErrLoadInProgress) {
				return err
			}
		}
	}
}

// grant is the one ownership decision of a request: from one snapshot of
// the source in force, whether this broker coordinates group and the stamp
// its writes carry. It also refuses while this broker's view is stale and
// while the group is still being released by a previous owner.
func (c *Coordinator) grant(group string) (offsets.Fence, error) {
	return c.grantBy(group, Source.Group)
}

// GrantTxn is the ownership decision for a transactional id (the hash tier
// only), with the stamp its writes carry, from one snapshot of the source
// in force; refused while this broker's view is stale and while the id is
// still being released by a previous coordinator.
func (c *Coordinator) GrantTxn(id string) (offsets.Fence, bool) {
	f, err := c.grantBy(id, Source.Txn)
	return f, err == nil
}

// grantBy is the ownership decision for key routed by route (groups or
// transactional ids), from one snapshot of the source in force.
func (c *Coordinator) grantBy(key string, route func(Source, string) (Broker, bool)) (offsets.Fence, error) {
	src := c.own.Source()
	if !src.Serving() {
		return offsets.Fence{}, ErrNotAvailable
	}
	if b, ok := route(src, key); !ok || b.ID != c.cfg.Me {
		return offsets.Fence{}, ErrNotCoordinator
	}
	if c.cfg.Fresh != nil && !c.cfg.Fresh() {
		return offsets.Fence{}, fmt.Errorf("%w: %w", ErrNotCoordinator, offsets.ErrNotFresh)
	}
	if t, ok := src.(*Table); ok && !c.released(key, t, route) {
		return offsets.Fence{}, ErrLoadInProgress
	}
	return src.Fence(), nil
}

// owner is group's Owner for the store: grant, evaluated under the group's
// lock at the moment of each read and write.
func (c *Coordinator) owner(group string) offsets.Owner {
	return offsets.OwnerFunc(func() (offsets.Fence, error) { return c.grant(group) })
}

// released reports whether no broker may still act on an assignment that
// routes key elsewhere: every assignment not yet settled, up to t, routes it
// here (by route: groups or transactional ids).
func (c *Coordinator) released(key string, t *Table, route func(Source, string) (Broker, bool)) bool {
	if !c.unsettled.Load() {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settle()
	for _, r := range c.recent {
		if r.a == nil {
			return false // what other brokers act on is not known yet
		}
		if r.a.Newer(t.a) {
			break
		}
		if b, ok := route(r, key); !ok || b.ID != c.cfg.Me {
			return false
		}
	}
	return true
}

// settle drops from recent the assignments no broker acts on any more: all
// before the newest settled one. Called with c.mu held.
func (c *Coordinator) settle() {
	defer func() { c.unsettled.Store(len(c.recent) > 1) }()
	if len(c.recent) <= 1 {
		return
	}
	now := c.cfg.Now()
	for i := len(c.recent) - 1; i > 0; i-- {
		t := c.recent[i]
		lapsed := c.cfg.SettleTimeout > 0 && now.Sub(t.applied) >= c.cfg.SettleTimeout
		if c.cfg.Settled == nil || c.cfg.Settled(t.a, lapsed) {
			c.recent = append([]*Table(nil), c.recent[i:]...)
			return
		}
	}
}

// hook runs the test hook between a request's check and its store call.
func (c *Coordinator) hook(op, group string) {
	if c.beforeWrite != nil {
		c.beforeWrite(op, group)
	}
}

// shellFor returns the resident shell of a group this broker coordinates
// under the assignment in force, creating it; a request that lost the group
// meanwhile (the orphan sweep ran) gets ErrNotCoordinator and leaves no
// resident state.
func (c *Coordinator) shellFor(group string) (*shell, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.groups[group]
	if !ok {
		if !c.own.OwnsGroup(group) {
			return nil, ErrNotCoordinator
		}
		s = &shell{id: group, emptySince: c.cfg.Now()}
		c.groups[group] = s
	}
	return s, nil
}

// resident returns the shell of group if it is in memory.
func (c *Coordinator) resident(group string) *shell {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups[group]
}

func storeErr(group string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, offsets.ErrFenced):
		return fmt.Errorf("%w: %w", ErrNotCoordinator, err)
	case errors.Is(err, offsets.ErrInvalidGroup):
		return ErrInvalidGroupID
	case errors.Is(err, ErrNotCoordinator), errors.Is(err, ErrNotAvailable), errors.Is(err, ErrLoadInProgress):
		return err
	}
	return fmt.Errorf("%w: group %q: %w", ErrCoordinatorLoadError, group, err)
}

// CommitInput is an OffsetCommit for one group.
type CommitInput struct {
	Group      string
	Version    int16 // the OffsetCommit version (consumer groups need v9+)
	Generation int32 // or, for a consumer group, the member epoch
	MemberID   string
	InstanceID *string
	Offsets    map[offsets.TP]offsets.Offset
}

// Commit checks membership and generation and queues the offsets for a
// durable write, in the order of calls; the returned wait reports the
// outcome after the fsync that covers them. Partitions refused on their
// own (a consumer group's stale member epoch, KIP-1251) come back in
// refused and are not written.
func (c *Coordinator) Commit(in CommitInput) (wait func(context.Context) error, refused map[offsets.TP]error, err error) {
	refused, err = c.admitCommit(in.Group, group.CommitCheck{Generation: in.Generation, MemberID: in.MemberID, InstanceID: in.InstanceID},
		in.Version, slices.Collect(maps.Keys(in.Offsets)))
	if err != nil {
		return nil, nil, err
	}
	if len(refused) > 0 {
		in.Offsets = maps.Clone(in.Offsets)
		for tp := range refused {
			delete(in.Offsets, tp)
		}
	}
	if len(in.Offsets) == 0 {
		return func(context.Context) error { return nil }, refused, nil
	}
	c.hook("commit", in.Group)
	w, err := c.store.CommitAsync(in.Group, c.owner(in.Group), in.Offsets)
	if err != nil {
		return nil, nil, storeErr(in.Group, err)
	}
	return func(ctx context.Context) error { return storeErr(in.Group, w(ctx)) }, refused, nil
}

// Fetch returns a group's committed offsets: all of them when tps is nil,
// else those asked for (missing ones absent from the map; the broker
// answers -1). An unknown group has no offsets and no error. The answer is
// the file's content at the time of the read, granted under the group's
// lock like a write: never a copy left from an earlier tenure.
func (c *Coordinator) Fetch(group string, tps []offsets.TP) (map[offsets.TP]offsets.Offset, error) {
	if err := c.check(group); err != nil {
		return nil, err
	}
	c.hook("fetch", group)
	all, err := c.store.Load(group, c.owner(group))
	if err != nil {
		return nil, storeErr(group, err)
	}
	if tps == nil {
		return all, nil
	}
	out := make(map[offsets.TP]offsets.Offset, len(tps))
	for _, tp := range tps {
		if o, ok := all[tp]; ok {
			out[tp] = o
		}
	}
	return out, nil
}

// DeleteOffsets removes committed offsets of topics the group does not
// subscribe to (OffsetDelete). Per-topic refusals come back in the map.
func (c *Coordinator) DeleteOffsets(ctx context.Context, group string, tps []offsets.TP) (map[string]error, error) {
	if err := c.check(group); err != nil {
		return nil, err
	}
	exists, err := c.store.Exists(group)
	if err != nil {
		return nil, storeErr(group, err)
	}
	subscribed := map[string]bool{}
	hasMembers := false
	if exists || c.resident(group) != nil {
		s, err := c.lockLoaded(group)
		if err != nil {
			return nil, err
		}
		if s.member != nil && !s.member.empty() {
			hasMembers = true
			for _, t := range s.member.subscribedTopics() {
				subscribed[t] = true
			}
		}
		if s.consumerInUse() {
			hasMembers = true
			for _, t := range s.consumer.core.SubscribedTopics(c.image()) {
				subscribed[t] = true
			}
		}
		s.mu.Unlock()
	}
	if !exists && !hasMembers {
		return nil, ErrGroupNotFound
	}
	refused := map[string]error{}
	var del []offsets.TP
	for _, tp := range tps {
		if subscribed[tp.Topic] {
			refused[tp.Topic] = ErrSubscribedToTopic
			continue
		}
		del = append(del, tp)
	}
	if len(del) > 0 {
		c.hook("delete-offsets", group)
		if err := c.store.Delete(ctx, group, c.owner(group), del); err != nil {
			return nil, storeErr(group, err)
		}
	}
	return refused, nil
}

// setAside is DeleteGroup of a group whose file cannot be decoded: the file
// is moved aside, bytes kept, and the group starts over empty
// (docs/operations.md, "A damaged group file").
func (c *Coordinator) setAside(group string) error {
	c.hook("delete-group", group)
	name, err := c.store.SetAside(group, c.owner(group))
	if err != nil {
		return storeErr(group, err)
	}
	if name == "" {
		return ErrLoadInProgress // the file decodes now: the retry deletes it
	}
	c.dropDeleted(group, c.resident(group))
	return nil
}

// dropDeleted unloads s, the shell of a group just deleted (nil: none), and
// reports whether it had a completed generation or epoch.
func (c *Coordinator) dropDeleted(group string, s *shell) (hadMembership bool) {
	if s == nil {
		return false
	}
	c.mu.Lock()
	if c.groups[group] == s {
		delete(c.groups, group)
	}
	c.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	hadMembership = (s.member != nil && s.member.generation() > 0) || (s.consumer != nil && s.consumer.core.Epoch() > 0)
	s.unload()
	return hadMembership
}

// DeleteGroup deletes an Empty group and its committed offsets, including a
// group that exists only as an offsets file (trap 2).
func (c *Coordinator) DeleteGroup(ctx context.Context, group string) error {
	if err := c.check(group); err != nil {
		return err
	}
	// A group with members only in its file (moved here, not touched yet)
	// is loaded first: it is not Empty.
	exists, err := c.store.Exists(group)
	if err != nil {
		return storeErr(group, err)
	}
	var s *shell
	if exists || c.resident(group) != nil {
		ls, err := c.lockLoaded(group)
		if errors.Is(err, offsets.ErrCorrupt) {
			return c.setAside(group)
		}
		if err != nil {
			return err
		}
		nonEmpty := ls.hasMembers()
		ls.mu.Unlock()
		if nonEmpty {
			return ErrNonEmptyGroup
		}
		s = ls
	}
	c.hook("delete-group", group)
	existed, err := c.store.DeleteGroup(ctx, group, c.owner(group))
	if err != nil {
		return storeErr(group, err)
	}
	hadMembership := c.dropDeleted(group, s)
	if !existed && !hadMembership {
		return ErrGroupNotFound
	}
	c.log.Info("group deleted", "group", group)
	return nil
}

// Listing is one ListGroups entry.
type Listing struct {
	Group        string
	State        string
	ProtocolType string
	Type         string // "consumer" for a KIP-848 group, else "classic"
}

// List returns the groups this broker coordinates: resident ones and those
// that exist only as files on the volume. Each is loaded as on first touch
// (its durable membership restored), so a group that moved here is listed
// in the state its members left it in, not Empty. It is loaded only once
// the hand-off lets this broker read it (the store asks grant); until then,
// and when its file cannot be read (logged), it is listed Empty: one such
// group does not hide the others.
func (c *Coordinator) List() ([]Listing, error) {
	if !c.Serving() {
		return nil, ErrNotAvailable
	}
	names, err := c.store.Groups()
	if err != nil {
		return nil, storeErr("", err)
	}
	onDisk := make(map[string]bool, len(names))
	for _, g := range names {
		onDisk[g] = true
	}
	ids := slices.Clone(names)
	c.mu.Lock()
	for id := range c.groups {
		if !onDisk[id] {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	sort.Strings(ids)
	var out []Listing
	for _, id := range ids {
		if !c.own.OwnsGroup(id) {
			continue
		}
		l := Listing{Group: id, State: "Empty"}
		s, err := c.lockLoaded(id)
		switch {
		case errors.Is(err, ErrNotCoordinator):
			continue
		case errors.Is(err, ErrLoadInProgress):
			// Gained, and the previous owner may still be writing
			// (docs/cluster.md, "Hand-off of a group"): listed Empty
			// for the few hundred milliseconds until it may be loaded.
		case err != nil:
			c.log.Warn("ListGroups: group state unreadable; listed Empty", "group", id, "err", err)
		default:
			switch {
			case s.consumer != nil:
				l.State, l.ProtocolType, l.Type = s.consumer.core.State(), "consumer", "consumer"
			case s.member != nil:
				l.State, l.ProtocolType = s.member.state(), s.member.protocolType()
			case s.infoSet:
				l.ProtocolType = s.info.ProtocolType
			}
			s.mu.Unlock()
		}
		if l.State == "Empty" && l.ProtocolType == "" && !onDisk[id] {
			continue // a shell with neither members nor offsets
		}
		out = append(out, l)
	}
	return out, nil
}

// Apply installs the assignment-backed source for a newly applied
// assignment and runs the takeover: every resident group that the new
// assignment routes elsewhere is dropped (the orphan sweep, over every
// resident group, not only those believed owned); gained groups are loaded
// lazily on first touch. Both sides log each move.
func (c *Coordinator) Apply(prev, next *cluster.Assignment) {
	nt := NewTable(next)
	nt.applied = c.cfg.Now()
	c.mu.Lock()
	pt := c.table
	c.table = nt
	if c.recent == nil {
		c.recent = []*Table{{}}
	}
	c.recent = append(c.recent, nt)
	c.settle()
	c.own.Swap(nt)
	var moved []*shell
	for id, s := range c.groups {
		if b, ok := nt.Group(id); !ok || b.ID != c.cfg.Me {
			moved = append(moved, s)
			delete(c.groups, id)
		}
	}
	c.mu.Unlock()
	c.cfg.Metrics.GroupsLost(len(moved))
	for _, s := range moved {
		to := "none"
		if b, ok := nt.Group(s.id); ok {
			to = b.ID
		}
		s.mu.Lock()
		s.unload()
		s.mu.Unlock()
		c.store.Evict(s.id)
		c.log.Info("group moved away", "group", s.id, "from", c.cfg.Me, "to", to,
			"epoch", next.ControllerEpoch, "version", next.AssignmentVersion)
	}
	// Offsets resident in the store without a shell (fetched only) follow
	// the same rule.
	for _, g := range c.store.Resident() {
		if b, ok := nt.Group(g); !ok || b.ID != c.cfg.Me {
			c.store.Evict(g)
		}
	}
	if pt == nil {
		return
	}
	// The gaining side: log groups whose placement moved here. Groups are
	// known by explicit entries in either assignment (a lazily loaded group
	// is otherwise invisible until its first request, logged there).
	cands := map[string]bool{}
	for _, g := range pt.Explicit() {
		cands[g] = true
	}
	for _, g := range nt.Explicit() {
		cands[g] = true
	}
	for g := range cands {
		pb, pok := pt.Group(g)
		nb, nok := nt.Group(g)
		if nok && nb.ID == c.cfg.Me && (!pok || pb.ID != c.cfg.Me) {
			c.log.Info("group moved here", "group", g, "from", pb.ID, "to", c.cfg.Me,
				"epoch", next.ControllerEpoch, "version", next.AssignmentVersion)
		}
	}
}

// CleanTemp removes the temp files that crashed writers (of any broker)
// left in the offsets directory more than age ago; it returns how many.
// It reads the directory: for housekeeping, not request paths.
func (c *Coordinator) CleanTemp(ctx context.Context, age time.Duration) (int, error) {
	return c.store.CleanTemp(ctx, age)
}

// Stats lists the resident groups' types, states and member counts, for
// the groups gauges (metrics.GroupStat). Groups held only as files on the
// volume are not read: a scrape costs no I/O.
func (c *Coordinator) Stats() []metrics.GroupStat {
	c.mu.Lock()
	shells := make([]*shell, 0, len(c.groups))
	for _, s := range c.groups {
		shells = append(shells, s)
	}
	c.mu.Unlock()
	out := make([]metrics.GroupStat, 0, len(shells))
	for _, s := range shells {
		s.mu.Lock()
		switch {
		case !s.loaded || s.gone:
		case s.consumer != nil:
			out = append(out, metrics.GroupStat{Type: "consumer", State: s.consumer.core.State(), Members: s.consumer.core.Members()})
		case s.member != nil:
			out = append(out, metrics.GroupStat{Type: "classic", State: s.member.state(), Members: s.member.core.Members()})
		default:
			out = append(out, metrics.GroupStat{Type: "classic", State: "Empty"})
		}
		s.mu.Unlock()
	}
	return out
}

// ActiveGroups lists resident groups in use (members, or a commit in the
// last five minutes): reported to the controller for group balancing.
func (c *Coordinator) ActiveGroups() []string {
	now := c.cfg.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id, s := range c.groups {
		s.mu.Lock()
		active := s.hasMembers() || now.Sub(s.lastCommit) < 5*time.Minute
		s.mu.Unlock()
		if active {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Resident lists the groups held in memory (shells and offsets).
func (c *Coordinator) Resident() []string {
	set := map[string]bool{}
	c.mu.Lock()
	for id := range c.groups {
		set[id] = true
	}
	c.mu.Unlock()
	for _, g := range c.store.Resident() {
		set[g] = true
	}
	out := make([]string, 0, len(set))
	for g := range set {
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

// DeleteTopic removes a deleted topic's committed offsets from every group
// this broker coordinates (a re-created topic must not inherit them).
func (c *Coordinator) DeleteTopic(ctx context.Context, topic string) error {
	return c.store.DeleteTopic(ctx, topic, func(group string) (offsets.Owner, bool) {
		return c.owner(group), c.own.OwnsGroup(group)
	})
}

// ExpireOffsets applies offsets retention (KIP-211) to the groups this
// broker coordinates, by the rule of docs/offsets.md ("Retention") and with
// what the group's file says of its membership, so every owner applies the
// same rule: a group without members loses its offsets once the retention
// has passed since it became Empty (each offset by its commit time for a
// group used for commits only); a consumer group with members loses only
// those of topics it no longer subscribes to; any other group with members
// keeps them. Explicit expire timestamps (OffsetCommit v2-v4) are honoured
// as given. Groups this pass loads are not kept in memory.
func (c *Coordinator) ExpireOffsets(ctx context.Context) {
	if !c.Serving() {
		return
	}
	names, err := c.store.Groups()
	if err != nil {
		c.log.Warn("offsets retention: listing groups failed", "err", err)
		return
	}
	resident := map[string]bool{}
	for _, g := range c.Resident() {
		resident[g] = true
	}
	now := c.cfg.Now().UnixMilli()
	for _, g := range names {
		if ctx.Err() != nil {
			return
		}
		if !c.own.OwnsGroup(g) {
			continue
		}
		// The group's durable membership is loaded as on any first touch:
		// members written by a previous owner count, and their sessions
		// start now; if they do not come back the group becomes Empty
		// (written with its emptySince) and a later pass expires it.
		s, err := c.lockLoaded(g)
		if err != nil {
			if !errors.Is(err, ErrNotCoordinator) && !errors.Is(err, ErrLoadInProgress) {
				c.log.Warn("offsets retention: loading the group failed", "group", g, "err", err)
			}
			continue
		}
		members := s.hasMembers()
		s.mu.Unlock()
		n, err := c.store.Expire(ctx, g, c.owner(g), now, c.cfg.Retention.Milliseconds(), members)
		if !resident[g] && !members {
			c.store.Evict(g)
			c.drop(s)
		}
		if err != nil {
			if !errors.Is(err, ErrNotCoordinator) && !errors.Is(err, ErrLoadInProgress) && !errors.Is(err, offsets.ErrFenced) {
				c.log.Warn("offsets retention failed", "group", g, "err", err)
			}
			continue
		}
		if n > 0 {
			c.log.Info("offsets expired", "group", g, "offsets", n)
		}
	}
}

// PendingTxnOffsets lists the partitions of a group with staged
// transactional offsets (OffsetFetch require_stable answers
// UNSTABLE_OFFSET_COMMIT for them). The staged offsets live in the group's
// file, so this holds after any coordinator move.
func (c *Coordinator) PendingTxnOffsets(group string) (map[offsets.TP]bool, error) {
	if err := c.check(group); err != nil {
		return nil, err
	}
	staged, err := c.store.StagedTxns(group, c.owner(group))
	if err != nil {
		return nil, storeErr(group, err)
	}
	if len(staged) == 0 {
		return nil, nil
	}
	out := map[offsets.TP]bool{}
	for _, st := range staged {
		for tp := range st.Offsets {
			out[tp] = true
		}
	}
	return out, nil
}

// TxnCommitInput is a TxnOffsetCommit for one group.
type TxnCommitInput struct {
	Group           string
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Generation      int32 // -1 without KIP-447 member information
	MemberID        string
	InstanceID      *string
	Offsets         map[offsets.TP]offsets.Offset
}

// TxnCommit stages transactional offsets on this group coordinator (in the
// group's file, durably); they become committed offsets only when the
// transaction's marker arrives (EndTxnOffsets) and are dropped on abort.
// With KIP-447 member information the group's generation rules apply.
//
// Partitions refused on their own (a consumer group's stale member epoch)
// come back in refused and are not staged.
func (c *Coordinator) TxnCommit(ctx context.Context, in TxnCommitInput) (refused map[offsets.TP]error, err error) {
	refused, err = c.admitCommit(in.Group, group.CommitCheck{Generation: in.Generation, MemberID: in.MemberID,
		InstanceID: in.InstanceID, Transactional: true}, 0, slices.Collect(maps.Keys(in.Offsets)))
	if err != nil {
		return nil, err
	}
	if len(refused) > 0 {
		in.Offsets = maps.Clone(in.Offsets)
		for tp := range refused {
			delete(in.Offsets, tp)
		}
		if len(in.Offsets) == 0 {
			return refused, nil
		}
	}
	c.hook("txn-stage", in.Group)
	err = c.store.Stage(ctx, in.Group, c.owner(in.Group), in.ProducerID, offsets.Staged{
		ProducerEpoch: in.ProducerEpoch, TransactionalID: in.TransactionalID, Offsets: in.Offsets})
	return refused, storeErr(in.Group, err)
}

// EndTxnOffsets applies a transaction marker to a group: its staged offsets
// of producer pid become committed (commit) or are dropped (abort).
func (c *Coordinator) EndTxnOffsets(ctx context.Context, groupID string, pid int64, commit bool) error {
	if err := c.check(groupID); err != nil {
		return err
	}
	c.hook("txn-end", groupID)
	found, err := c.store.EndTxn(ctx, groupID, c.owner(groupID), pid, commit)
	if err != nil {
		return storeErr(groupID, err)
	}
	if found {
		c.log.Info("transactional offsets ended", "group", groupID, "producer_id", pid, "commit", commit)
	}
	return nil
}

// drop forgets a resident shell that holds nothing worth keeping.
func (c *Coordinator) drop(s *shell) {
	c.mu.Lock()
	if c.groups[s.id] == s {
		delete(c.groups, s.id)
	}
	c.mu.Unlock()
	s.mu.Lock()
	s.unload()
	s.mu.Unlock()
}

// EvictIdle forgets groups that have had no members and no commits for
// longer than idle: their shells and their offsets held in memory. Their
// files stay; the next request loads them again. This keeps memory bounded
// by the groups in use, not by every group ever touched.
func (c *Coordinator) EvictIdle(idle time.Duration) int {
	now := c.cfg.Now()
	c.mu.Lock()
	var gone []*shell
	for id, s := range c.groups {
		s.mu.Lock()
		quiet := !s.hasMembers() && now.Sub(s.lastCommit) > idle
		if quiet {
			s.unload()
			delete(c.groups, id)
			gone = append(gone, s)
		}
		s.mu.Unlock()
	}
	c.mu.Unlock()
	for _, s := range gone {
		c.store.Evict(s.id)
	}
	return len(gone)
}
