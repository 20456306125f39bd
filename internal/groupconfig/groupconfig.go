// Package groupconfig keeps the configs set on a group (Kafka's GROUP config
// resource, KIP-848: consumer.session.timeout.ms and
// consumer.heartbeat.interval.ms override the broker's
// group.consumer.session.timeout.ms and group.consumer.heartbeat.interval.ms
// for one group). They live in one file on the volume,
// <data>/__cluster/group-configs.json, which only the controller writes
// (IncrementalAlterConfigs is forwarded to it) and every coordinator reads,
// at most once a second (docs/cgroup.md, "Group configs").
package groupconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaas-dev/kaas/internal/fsutil"
	"github.com/kaas-dev/kaas/internal/volume"
)

// The group configs kaas acts on, by Kafka's names.
const (
	SessionTimeout    = "consumer.session.timeout.ms"
	HeartbeatInterval = "consumer.heartbeat.interval.ms"
)

// ErrInvalid is what every refused config is (Kafka's INVALID_CONFIG).
var ErrInvalid = errors.New("invalid group config")

// invalidError is a refused config, its message Kafka's.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return ErrInvalid }

func invalid(format string, args ...any) error {
	return &invalidError{fmt.Sprintf(format, args...)}
}

// Bounds are the ranges a group's value must fall in: Kafka's
// group.consumer.{min,max}.{session.timeout,heartbeat.interval}.ms,
// 45-60 s and 5-15 s by default, widened to hold the broker's own default
// when that is set outside them (kaas has no min and max flags).
type Bounds struct {
	Session, Heartbeat struct{ Min, Max time.Duration }
}

// BoundsFor returns Kafka's bounds, widened to hold the broker's defaults.
func BoundsFor(session, heartbeat time.Duration) Bounds {
	var b Bounds
	b.Session.Min, b.Session.Max = min(45*time.Second, session), max(60*time.Second, session)
	b.Heartbeat.Min, b.Heartbeat.Max = min(5*time.Second, heartbeat), max(15*time.Second, heartbeat)
	return b
}

// Validate checks one value against the bounds, with Kafka's messages.
func (b Bounds) Validate(name, value string) error {
	var lo, hi time.Duration
	switch name {
	case SessionTimeout:
		lo, hi = b.Session.Min, b.Session.Max
	case HeartbeatInterval:
		lo, hi = b.Heartbeat.Min, b.Heartbeat.Max
	default:
		if known[name] {
			return invalid("%s: kaas serves no share or streams groups and assigns at once; it sets only %s and %s", name, SessionTimeout, HeartbeatInterval)
		}
		return invalid("Unknown group config name: %s", name)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 32)
	if err != nil {
		return invalid("Invalid value %s for configuration %s: Not a number of type INT", value, name)
	}
	if ms := time.Duration(n) * time.Millisecond; ms < lo || ms > hi {
		return invalid("%s must be in the range %d to %d inclusive.", name, lo.Milliseconds(), hi.Milliseconds())
	}
	return nil
}

// known are Kafka 4.4's other group configs: named, they are refused with
// the reason rather than as unknown.
var known = map[string]bool{
	"consumer.assignment.interval.ms": true, "errors.deadletterqueue.copy.record.enable": true,
	"errors.deadletterqueue.topic.name": true, "share.assignment.interval.ms": true, "share.auto.offset.reset": true,
	"share.delivery.count.limit": true, "share.heartbeat.interval.ms": true, "share.isolation.level": true,
	"share.partition.max.record.locks": true, "share.record.lock.duration.ms": true, "share.renew.acknowledge.enable": true,
	"share.session.timeout.ms": true, "streams.assignment.interval.ms": true, "streams.assignor.name": true,
	"streams.heartbeat.interval.ms": true, "streams.initial.rebalance.delay.ms": true, "streams.num.standby.replicas": true,
	"streams.rack.aware.assignment.tags": true, "streams.session.timeout.ms": true,
}

// Op is one IncrementalAlterConfigs operation on a group config.
type Op struct {
	Name  string
	Op    int8 // 0 SET, 1 DELETE (APPEND and SUBTRACT apply to lists; none here)
	Value string
}

// Overrides are what a group's configs change; zero: the broker's default.
type Overrides struct {
	SessionTimeout, HeartbeatInterval time.Duration
}

// file is the on-disk form: group id → config name → value.
type file struct {
	Groups map[string]map[string]string `json:"groups"`
}

// Store reads and (on the controller) writes the file. Safe for
// concurrent use.
type Store struct {
	path   string
	maxAge time.Duration
	// freshWait bounds how long the heartbeat that starts a re-read waits
	// for it (Overrides).
	freshWait time.Duration
	now       func() time.Time
	stat      func(string) (fs.FileInfo, error) // os.Stat; a test's stalls

	wmu        sync.Mutex // serializes Alter
	mu         sync.Mutex // guards the fields below; held for no file I/O
	groups     map[string]map[string]string
	version    fsutil.Version
	read       time.Time // when the file was last looked at
	refreshing bool      // a background re-read is under way (Overrides)
	// gen grows with every change of groups: a read that began before
	// one does not overwrite it.
	gen uint64
}

// Open returns the store of the volume under dataDir, with the file read
// once (a file that cannot be read now is read again at the next use).
func Open(dataDir string) *Store {
	s := &Store{path: volume.GroupConfigsPath(dataDir), maxAge: time.Second, freshWait: 100 * time.Millisecond, now: time.Now, stat: os.Stat}
	if groups, v, _, err := s.load(fsutil.Version{}); err == nil {
		s.groups, s.version, s.read = groups, v, s.now()
	}
	return s
}

// load reads the file unless it is still version have. It takes no lock:
// a stalled volume stalls only its caller.
func (s *Store) load(have fsutil.Version) (groups map[string]map[string]string, v fsutil.Version, changed bool, err error) {
	fi, err := s.stat(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fsutil.Version{}, true, nil
	}
	if err != nil {
		return nil, v, false, fmt.Errorf("groupconfig: %w", err)
	}
	if have.Same(fi) {
		return nil, have, false, nil
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		return nil, v, false, fmt.Errorf("groupconfig: %w", err)
	}
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, v, false, fmt.Errorf("groupconfig: %s: %w", s.path, err)
	}
	return f.Groups, fsutil.VersionOf(fi), true, nil
}

// Get returns the configs set on group (nil when none), read from the
// volume now.
func (s *Store) Get(group string) (map[string]string, error) {
	s.mu.Lock()
	have, gen := s.version, s.gen
	s.mu.Unlock()
	groups, v, changed, err := s.load(have)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && changed && s.gen == gen {
		s.groups, s.version, s.read = groups, v, s.now()
		s.gen++
	}
	var out map[string]string
	for k, val := range s.groups[group] {
		if out == nil {
			out = map[string]string{}
		}
		out[k] = val
	}
	return out, err
}

// Overrides returns what group's configs change. When the values are older
// than a second the heartbeat that finds them so re-reads the file in the
// background and waits for that read at most freshWait (100 ms), so that a
// config altered on the controller applies to it, as on Kafka (whose
// brokers learn it from the metadata log, usually within milliseconds);
// heartbeats meanwhile answer with the values held. A stalled volume so
// costs one heartbeat those 100 ms, once per stalled read. A coordinator
// calls it on every heartbeat, before it takes the group's lock.
func (s *Store) Overrides(group string) Overrides {
	s.mu.Lock()
	if !s.refreshing && (s.read.IsZero() || !s.read.Add(s.maxAge).After(s.now())) {
		s.refreshing, s.read = true, s.now()
		have, gen, done := s.version, s.gen, make(chan struct{})
		go func() {
			groups, v, changed, err := s.load(have)
			s.mu.Lock()
			defer s.mu.Unlock()
			if err == nil && changed && s.gen == gen { // else Alter or Get got there first
				s.groups, s.version = groups, v
				s.gen++
			}
			s.refreshing = false
			close(done)
		}()
		s.mu.Unlock()
		select {
		case <-done:
		case <-time.After(s.freshWait):
		}
		s.mu.Lock()
	}
	cfgs := s.groups[group]
	var o Overrides
	if v, ok := cfgs[SessionTimeout]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			o.SessionTimeout = time.Duration(n) * time.Millisecond
		}
	}
	if v, ok := cfgs[HeartbeatInterval]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			o.HeartbeatInterval = time.Duration(n) * time.Millisecond
		}
	}
	s.mu.Unlock()
	return o
}

// Alter applies ops to group's configs after validating every one of them
// against b; with validateOnly nothing is written. Only the controller
// calls it, so the file has one writer.
func (s *Store) Alter(group string, ops []Op, b Bounds, validateOnly bool) error {
	if group == "" {
		return invalid("a group config needs a group id")
	}
	seen := map[string]bool{}
	for _, op := range ops {
		if seen[op.Name] {
			return invalid("%s is altered more than once", op.Name)
		}
		seen[op.Name] = true
		switch op.Op {
		case 0:
			if err := b.Validate(op.Name, op.Value); err != nil {
				return err
			}
		case 1:
			if op.Name != SessionTimeout && op.Name != HeartbeatInterval {
				if err := b.Validate(op.Name, ""); err != nil {
					return err
				}
			}
		default:
			return invalid("%s: APPEND and SUBTRACT apply to list configs; group configs hold single values", op.Name)
		}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	current, _, _, err := s.load(fsutil.Version{})
	if err != nil {
		return err
	}
	next := map[string]map[string]string{}
	for g, c := range current {
		next[g] = c
	}
	cfg := map[string]string{}
	for k, v := range current[group] {
		cfg[k] = v
	}
	for _, op := range ops {
		if op.Op == 0 {
			cfg[op.Name] = strings.TrimSpace(op.Value)
		} else {
			delete(cfg, op.Name)
		}
	}
	if validateOnly {
		return nil
	}
	if len(cfg) == 0 {
		delete(next, group)
	} else {
		next[group] = cfg
	}
	data, err := json.MarshalIndent(file{Groups: next}, "", "  ")
	if err != nil {
		return fmt.Errorf("groupconfig: %w", err)
	}
	if err := fsutil.WriteFile(s.path, data); err != nil {
		return fmt.Errorf("groupconfig: %w", err)
	}
	s.mu.Lock()
	s.groups = next
	s.version = fsutil.Version{} // the next read takes the file written
	s.gen++
	s.mu.Unlock()
	return nil
}

// Names lists the configs a DescribeConfigs of a group shows, sorted.
func Names() []string {
	n := []string{HeartbeatInterval, SessionTimeout}
	sort.Strings(n)
	return n
}
