// Package topics owns the registry of topics on the shared volume: one JSON
// file per topic under <data>/__cluster/topics/. It validates topic names and
// configs and must not import other kaas packages except internal/fsutil.
//
// File format (<data>/__cluster/topics/<name>.json), compact JSON:
//
//	{"name":"orders","id":"<32 hex digits>","partitions":6,
//	 "configs":{"retention.ms":"86400000"},"createdAt":"2026-11-29T12:00:00Z"}
//
// Creation is atomic and exclusive across brokers: the file is written
// durably (fsutil.WriteFile) to a unique staging name, +stage-<16 hex digits>,
// then hard-linked to its final name (link fails if the name exists, like
// O_EXCL), the staging name removed and the directory fsynced. A change
// (CreatePartitions) stages the same way and renames over the file. The
// staging name does not derive from the topic's: a topic name may be 249
// bytes, and <name>.json is then 254, at the file system's 255-byte limit.
// Staging files older than ten minutes are left by a crash and removed at
// Open. Deletion removes the file. Readers ignore unknown fields.
//
// Topic configs are checked against the bounds of Kafka 4.x's LogConfig
// (config.go) before anything is written, and stored with their values
// trimmed.
package topics

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaas-dev/kaas/internal/fsutil"
	"github.com/kaas-dev/kaas/internal/volume"
)

var (
	ErrExists        = errors.New("topics: topic already exists")
	ErrUnknown       = errors.New("topics: unknown topic")
	ErrInvalidName   = errors.New("topics: invalid topic name")
	ErrInvalidConfig = errors.New("topics: invalid config") // wrapped by *ConfigError
	ErrInvalidCount  = errors.New("topics: invalid partition count")
)

// MaxNameLen is Kafka's limit on topic names.
const MaxNameLen = 249

// reserved names are not topics a client may create: the folder of cluster
// state on the volume (a topic is a folder beside it) and Kafka's internal
// topics, whose names clients and tools treat specially.
var reserved = map[string]bool{volume.ClusterDirName: true, kafkaOffsetsTopic: true, kafkaTransactionsTopic: true}

// Kafka's internal topics.
const (
	kafkaOffsetsTopic      = "__consumer_offsets"
	kafkaTransactionsTopic = "__transaction_state"
)

// ValidateName applies Kafka's topic name rules ([a-zA-Z0-9._-], 1..249
// characters, not "." or "..") and refuses names reserved for cluster state.
// A valid name is always a safe single path element.
func ValidateName(name string) error {
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d characters (max %d)", ErrInvalidName, len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q contains %q", ErrInvalidName, name, c)
		}
	}
	if reserved[name] {
		return fmt.Errorf("%w: %q is reserved", ErrInvalidName, name)
	}
	return nil
}

// ID is a topic id (UUID bytes).
type ID [16]byte

func (id ID) String() string { return hex.EncodeToString(id[:]) }

// MarshalText encodes the id as hex.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText decodes a 32-hex-digit id.
func (id *ID) UnmarshalText(b []byte) error {
	if len(b) != 32 {
		return fmt.Errorf("topics: bad id %q", b)
	}
	_, err := hex.Decode(id[:], b)
	return err
}

// Topic is one registry entry.
type Topic struct {
	Name       string            `json:"name"`
	ID         ID                `json:"id"`
	Partitions int32             `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
}

// Registry reads and writes topic files. Safe for concurrent use.
type Registry struct {
	dir string
	log *slog.Logger

	mu     sync.RWMutex // guards byName, byID, stamps, listed, gen
	byName map[string]*Topic
	byID   map[ID]*Topic
	stamps map[string]fsutil.Version // each file as last read: a rewrite by CreatePartitions (a rename, a new inode) has another
	listed time.Time
	gen    uint64 // grows whenever a topic is added, removed or changed
	// dirStamp is the folder's version (fsutil.Version) as it was before
	// the last listing: a name added or removed since changes it (Listed).
	dirStamp fsutil.Version

	// alterMu serializes this registry's rewrites of topic files (Grow,
	// AlterConfigs): each reads the topic, changes it and writes it whole.
	alterMu sync.Mutex
}

// Gen grows whenever the registry's topics change (created, deleted,
// grown, or a file rewritten by another broker): what is derived from
// All can be kept until it moves.
func (r *Registry) Gen() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.gen
}

// Open returns the registry rooted at <dataDir>/__cluster/topics.
func Open(dataDir string, log *slog.Logger) (*Registry, error) {
	dir := volume.TopicsDir(dataDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("topics: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{dir: dir, log: log, byName: map[string]*Topic{}, byID: map[ID]*Topic{}, stamps: map[string]fsutil.Version{}}
	r.removeStaleStaging(time.Now())
	if err := r.Refresh(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Registry) path(name string) string { return filepath.Join(r.dir, name+".json") }

// stagingPrefix starts the names of files being written (see the package
// doc): '+' is not allowed in a topic name, so no topic file starts with it.
// Before, it was ".stage-", the start of valid topic names too (Kafka
// allows a leading dot); such files without the ".json" of a topic file
// are still removed when a crash left them.
const (
	stagingPrefix    = "+stage-"
	oldStagingPrefix = ".stage-"
)

// stage writes data durably under a fresh staging name and returns its path.
func (r *Registry) stage(data []byte) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	p := filepath.Join(r.dir, stagingPrefix+hex.EncodeToString(b[:]))
	if err := fsutil.WriteFile(p, data); err != nil {
		return "", err
	}
	return p, nil
}

// removeStaleStaging deletes staging files a crash left behind. Young ones
// may belong to another broker writing now and are left alone.
func (r *Registry) removeStaleStaging(now time.Time) {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, stagingPrefix) && !(strings.HasPrefix(n, oldStagingPrefix) && !strings.HasSuffix(n, ".json")) {
			continue
		}
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > 10*time.Minute {
			if err := os.Remove(filepath.Join(r.dir, e.Name())); err == nil {
				r.log.Info("removed a topic file a crash left half written", "file", e.Name())
			}
		}
	}
}

// Refresh re-reads the directory so that topics created or deleted by other
// brokers become visible. Unreadable files are skipped with a log line. A
// topic created, deleted or changed here while the directory was being read
// makes it read again (at most refreshTries times; then the maps are left as
// they are until the next refresh): the listing may be older than that
// change, and putting it in place would undo it.
func (r *Registry) Refresh() error {
	for range refreshTries {
		done, err := r.refreshOnce()
		if err != nil || done {
			return err
		}
	}
	return nil
}

// refreshTries bounds the directory reads of one Refresh.
const refreshTries = 3

// refreshOnce reads the directory and puts what it found in place, unless
// the registry changed meanwhile (done false).
func (r *Registry) refreshOnce() (done bool, err error) {
	r.mu.RLock()
	old, oldStamps, gen := maps.Clone(r.byName), maps.Clone(r.stamps), r.gen
	r.mu.RUnlock()
	var dirStamp fsutil.Version
	if info, err := os.Stat(r.dir); err == nil {
		dirStamp = fsutil.VersionOf(info)
	}
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return false, fmt.Errorf("topics: list: %w", err)
	}
	byName := make(map[string]*Topic, len(ents))
	byID := make(map[ID]*Topic, len(ents))
	stamps := make(map[string]fsutil.Version, len(ents))
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".json") || strings.HasPrefix(n, stagingPrefix) {
			continue
		}
		name := strings.TrimSuffix(n, ".json")
		if ValidateName(name) != nil {
			continue
		}
		info, ierr := e.Info()
		if ierr != nil {
			continue // removed meanwhile
		}
		st := fsutil.VersionOf(info)
		t := old[name]
		if t == nil || oldStamps[name] != st {
			if t, err = r.read(name); err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					r.log.Warn("topic file unreadable; skipped", "topic", name, "err", err)
				}
				continue
			}
		}
		byName[name] = t
		byID[t.ID] = t
		stamps[name] = st
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen != gen {
		return false, nil // changed here meanwhile: read again
	}
	if !maps.Equal(stamps, r.stamps) {
		r.gen++
	}
	r.byName, r.byID, r.stamps, r.listed, r.dirStamp = byName, byID, stamps, time.Now(), dirStamp
	return true, nil
}

func (r *Registry) read(name string) (*Topic, error) {
	b, err := os.ReadFile(r.path(name))
	if err != nil {
		return nil, err
	}
	var t Topic
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("topics: decode %s: %w", name, err)
	}
	if t.Name != name || t.Partitions < 1 {
		return nil, fmt.Errorf("topics: file %s.json holds %q with %d partitions", name, t.Name, t.Partitions)
	}
	if err := ValidateConfigs(t.Configs); err != nil {
		// Written before kaas checked Kafka's bounds: the topic stays usable,
		// the operator is told.
		r.log.Warn("topic has a config Kafka would refuse; it was created before kaas checked configs", "topic", name, "err", err)
	}
	return &t, nil
}

// Get returns a topic, reading its file when it is not cached yet (another
// broker may have created it since the last refresh).
func (r *Registry) Get(name string) (*Topic, bool) {
	r.mu.RLock()
	t, ok := r.byName[name]
	r.mu.RUnlock()
	if ok {
		return t, true
	}
	if ValidateName(name) != nil {
		return nil, false
	}
	t, err := r.read(name)
	if err != nil {
		return nil, false
	}
	r.mu.Lock()
	r.byName[name] = t
	r.byID[t.ID] = t
	r.gen++
	r.mu.Unlock()
	return t, true
}

// Fresh returns a topic as its file holds it now: the cached copy if the
// file is the one last read here, else the file read again and cached. For
// answers that must show a change another broker has just made (a
// DescribeConfigs right after an alter the controller answered); the hot
// paths use Get, which refreshes at most once a second.
func (r *Registry) Fresh(name string) (*Topic, bool) {
	if ValidateName(name) != nil {
		return nil, false
	}
	info, err := os.Stat(r.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		r.log.Warn("topic file unreadable; its cached copy answers", "topic", name, "err", err)
		return r.Get(name)
	}
	st := fsutil.VersionOf(info)
	r.mu.RLock()
	t, ok := r.byName[name]
	cached := r.stamps[name]
	r.mu.RUnlock()
	if ok && cached == st {
		return t, true
	}
	if t, err = r.read(name); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false
		}
		r.log.Warn("topic file unreadable; its cached copy answers", "topic", name, "err", err)
		return r.Get(name)
	}
	r.mu.Lock()
	r.byName[name], r.byID[t.ID], r.stamps[name] = t, t, st
	r.gen++
	r.mu.Unlock()
	return t, true
}

// ByID returns the topic with id, if known.
func (r *Registry) ByID(id ID) (*Topic, bool) {
	r.mu.RLock()
	t, ok := r.byID[id]
	r.mu.RUnlock()
	return t, ok
}

// Listed lists the topics as the folder holds them now: All, after a
// Refresh when a name was added to or removed from the folder since the
// last listing (one stat when none was). For answers that list every
// topic (Metadata for all, as kafka-topics --list sends): a topic another
// broker has just created or deleted is listed as it is, not as it was at
// the last periodic refresh, up to a second earlier.
func (r *Registry) Listed() []*Topic {
	if info, err := os.Stat(r.dir); err == nil {
		r.mu.RLock()
		same := r.dirStamp == fsutil.VersionOf(info)
		r.mu.RUnlock()
		if !same {
			if err := r.Refresh(); err != nil {
				r.log.Warn("topics folder unreadable; the topics last listed answer", "err", err)
			}
		}
	}
	return r.All()
}

// All lists the known topics sorted by name.
func (r *Registry) All() []*Topic {
	r.mu.RLock()
	out := make([]*Topic, 0, len(r.byName))
	for _, t := range r.byName {
		out = append(out, t)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Create validates and creates a topic. With validateOnly nothing is written.
func (r *Registry) Create(name string, partitions int32, configs map[string]string, validateOnly bool) (*Topic, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if partitions < 1 || partitions > MaxPartitions {
		return nil, fmt.Errorf("%w: %d (1..%d)", ErrInvalidCount, partitions, MaxPartitions)
	}
	if err := ValidateConfigs(configs); err != nil {
		return nil, fmt.Errorf("topics: create %s: %w", name, err)
	}
	if _, ok := r.Get(name); ok {
		return nil, fmt.Errorf("%w: %s", ErrExists, name)
	}
	t := &Topic{Name: name, Partitions: partitions, Configs: normalizeConfigs(configs), CreatedAt: time.Now().UTC()}
	if _, err := rand.Read(t.ID[:]); err != nil {
		return nil, fmt.Errorf("topics: id: %w", err)
	}
	if validateOnly {
		return t, nil
	}
	b, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("topics: encode %s: %w", name, err)
	}
	staged, err := r.stage(b)
	if err != nil {
		return nil, fmt.Errorf("topics: create %s: %w", name, err)
	}
	err = os.Link(staged, r.path(name))
	os.Remove(staged)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: %s", ErrExists, name)
		}
		return nil, fmt.Errorf("topics: create %s: %w", name, err)
	}
	if err := fsutil.SyncDir(r.dir); err != nil {
		return nil, fmt.Errorf("topics: create %s: %w", name, err)
	}
	r.mu.Lock()
	r.byName[name] = t
	r.byID[t.ID] = t
	r.gen++
	r.mu.Unlock()
	return t, nil
}

// Delete removes a topic's registry file. The caller removes its data.
func (r *Registry) Delete(name string) (*Topic, error) {
	t, ok := r.Get(name)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknown, name)
	}
	if err := os.Remove(r.path(name)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrUnknown, name)
		}
		return nil, fmt.Errorf("topics: delete %s: %w", name, err)
	}
	if err := fsutil.SyncDir(r.dir); err != nil {
		return nil, fmt.Errorf("topics: delete %s: %w", name, err)
	}
	r.mu.Lock()
	delete(r.byName, name)
	delete(r.byID, t.ID)
	r.gen++
	r.mu.Unlock()
	return t, nil
}

// MaxPartitions bounds the partition count of one topic.
const MaxPartitions = 10000

// Int64 returns a numeric config or def when unset.
func (t *Topic) Int64(key string, def int64) int64 {
	if v, ok := t.Configs[key]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return def
}

// String returns a config or def when unset.
func (t *Topic) String(key, def string) string {
	if v, ok := t.Configs[key]; ok {
		return v
	}
	return def
}

// Deletes reports whether the cleanup policy deletes old segments.
func (t *Topic) Deletes() bool {
	return strings.Contains(t.String("cleanup.policy", "delete"), "delete")
}

// Grow raises a topic's partition count to count (the caller is the
// controller, the file's single writer for this change). Partitions are
// never removed.
func (r *Registry) Grow(name string, count int32, validateOnly bool) (*Topic, error) {
	r.alterMu.Lock()
	defer r.alterMu.Unlock()
	t, ok := r.Get(name)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknown, name)
	}
	if count <= t.Partitions || count > MaxPartitions {
		return nil, fmt.Errorf("%w: %s has %d partitions, asked for %d (more, at most %d)", ErrInvalidCount, name, t.Partitions, count, MaxPartitions)
	}
	grown := *t
	grown.Partitions = count
	if validateOnly {
		return &grown, nil
	}
	if err := r.replace(&grown); err != nil {
		return nil, fmt.Errorf("topics: grow %s: %w", name, err)
	}
	return &grown, nil
}

// AlterConfigs applies IncrementalAlterConfigs operations to a topic's
// configs (the caller is the controller, the file's single writer for this
// change, as for Grow). With validateOnly nothing is written. Brokers that
// lead its partitions apply the new values at their next refresh.
func (r *Registry) AlterConfigs(name string, ops []ConfigOp, validateOnly bool) (*Topic, error) {
	r.alterMu.Lock()
	defer r.alterMu.Unlock()
	t, ok := r.Get(name)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknown, name)
	}
	configs, err := applyOps(t.Configs, ops)
	if err != nil {
		return nil, err
	}
	altered := *t
	altered.Configs = configs
	if len(configs) == 0 {
		altered.Configs = nil
	}
	if validateOnly {
		return &altered, nil
	}
	if err := r.replace(&altered); err != nil {
		return nil, fmt.Errorf("topics: alter configs of %s: %w", name, err)
	}
	return &altered, nil
}

// replace durably rewrites t's file (staged, renamed over the old one) and
// caches t.
func (r *Registry) replace(t *Topic) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	staged, err := r.stage(b)
	if err == nil {
		if err = os.Rename(staged, r.path(t.Name)); err != nil {
			os.Remove(staged)
		} else {
			err = fsutil.SyncDir(r.dir)
		}
	}
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.byName[t.Name] = t
	r.byID[t.ID] = t
	r.gen++
	r.mu.Unlock()
	return nil
}
