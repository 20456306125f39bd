package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kaas-dev/kaas/internal/fsutil"
)

// File names inside a partition directory (formats in the package doc).
const (
	epochFileName    = "leader-epoch"
	lsoFileName      = "log-start-offset"
	snapshotFileName = "producer-state"
	logSuffix        = ".log"
	indexSuffix      = ".index"
	sealSuffix       = ".seal"
	tmpMarker        = ".tmp-"
	strayMarker      = ".stray-"

	indexEntrySize = 24
)

func segmentName(base int64, suffix string) string { return fmt.Sprintf("%020d%s", base, suffix) }

// parseSegmentName returns the base offset of "<20 digits><suffix>".
func parseSegmentName(name, suffix string) (int64, bool) {
	if len(name) != 20+len(suffix) || !strings.HasSuffix(name, suffix) {
		return 0, false
	}
	base, err := strconv.ParseInt(name[:20], 10, 64)
	if err != nil || base < 0 {
		return 0, false
	}
	return base, true
}

// syncDir fsyncs a directory so that creates, renames and removes in it are
// durable.
func syncDir(dir string) error {
	if err := fsutil.SyncDir(dir); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	return nil
}

// writeFileAtomic replaces dir/name with data durably: fsutil.WriteFile's
// temp file (a name unique to the writer, beside it, with ".tmp-" in it:
// two brokers may write the same file), fsync, rename, fsync dir.
func writeFileAtomic(dir, name string, data []byte) error {
	if err := fsutil.WriteFile(filepath.Join(dir, name), data); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	return nil
}

// ownerFileName holds the incarnation a partition directory belongs to
// (Options.Owner): the owner string and a newline.
const ownerFileName = "owner"

// claimOwner checks dir's owner file against owner, writing it (durably)
// when the directory has none. A different owner is ErrOtherOwner.
func claimOwner(dir, owner string) error {
	if owner == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(dir, ownerFileName))
	switch {
	case err == nil:
		if got := strings.TrimSpace(string(data)); got != owner {
			return fmt.Errorf("storage: %s: %w: %s, not %s", dir, ErrOtherOwner, got, owner)
		}
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return writeFileAtomic(dir, ownerFileName, []byte(owner+"\n"))
	default:
		return fmt.Errorf("storage: read owner of %s: %w", dir, err)
	}
}

// removeStaleTemps deletes temp files left by a crash. Young ones may belong
// to a live writer (another broker) and are left alone.
func removeStaleTemps(dir string, now time.Time) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.Contains(e.Name(), tmpMarker) {
			continue
		}
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > 10*time.Minute {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// frame and unframe wrap a metadata file body: magic | body | crc32c(magic|body).
func frame(magic string, body []byte) []byte {
	b := append([]byte(magic), body...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func unframe(magic string, b []byte) ([]byte, error) {
	if len(b) < len(magic)+4 || string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: not a %s file", ErrCorrupt, magic)
	}
	n := len(b) - 4
	if crc32.Checksum(b[:n], castagnoli) != binary.BigEndian.Uint32(b[n:]) {
		return nil, fmt.Errorf("%w: %s file checksum", ErrCorrupt, magic)
	}
	return b[len(magic):n], nil
}

// readFramed reads and unframes dir/name; exists=false when it is missing.
func readFramed(dir, name, magic string) (body []byte, exists bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("storage: read %s/%s: %w", dir, name, err)
	}
	body, err = unframe(magic, b)
	if err != nil {
		return nil, true, fmt.Errorf("storage: %s/%s: %w", dir, name, err)
	}
	return body, true, nil
}

// epochEntry is one line of the leader epoch history.
type epochEntry struct {
	Epoch       int32
	StartOffset int64
}

// epochFile is the content of leader-epoch.
type epochFile struct {
	Epoch   int32
	History []epochEntry
}

const epochMagic = "KLE1"

func encodeEpochFile(e epochFile) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(e.Epoch))
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.History)))
	for _, h := range e.History {
		b = binary.BigEndian.AppendUint32(b, uint32(h.Epoch))
		b = binary.BigEndian.AppendUint64(b, uint64(h.StartOffset))
	}
	return frame(epochMagic, b)
}

func decodeEpochFile(raw []byte) (epochFile, error) {
	b, err := unframe(epochMagic, raw)
	if err != nil {
		return epochFile{}, err
	}
	if len(b) < 8 {
		return epochFile{}, fmt.Errorf("%w: short epoch file", ErrCorrupt)
	}
	e := epochFile{Epoch: int32(binary.BigEndian.Uint32(b))}
	n := binary.BigEndian.Uint32(b[4:])
	b = b[8:]
	if uint64(len(b)) != uint64(n)*12 {
		return epochFile{}, fmt.Errorf("%w: epoch history length", ErrCorrupt)
	}
	for i := uint32(0); i < n; i++ {
		e.History = append(e.History, epochEntry{
			Epoch:       int32(binary.BigEndian.Uint32(b)),
			StartOffset: int64(binary.BigEndian.Uint64(b[4:])),
		})
		b = b[12:]
	}
	return e, nil
}

func readEpochFile(dir string) (epochFile, bool, error) {
	raw, err := os.ReadFile(filepath.Join(dir, epochFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return epochFile{}, false, nil
	}
	if err != nil {
		return epochFile{}, false, fmt.Errorf("storage: read %s/%s: %w", dir, epochFileName, err)
	}
	e, err := decodeEpochFile(raw)
	if err != nil {
		return epochFile{}, true, fmt.Errorf("storage: %s/%s: %w", dir, epochFileName, err)
	}
	return e, true, nil
}

// sealRecord is the content of <base>.seal.
type sealRecord struct {
	Length    int64
	EndOffset int64
	Epoch     int32
}

const sealMagic = "KSL1"

func encodeSeal(s sealRecord) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(s.Length))
	b = binary.BigEndian.AppendUint64(b, uint64(s.EndOffset))
	b = binary.BigEndian.AppendUint32(b, uint32(s.Epoch))
	return frame(sealMagic, b)
}

func readSeal(dir string, base int64) (sealRecord, bool, error) {
	b, ok, err := readFramed(dir, segmentName(base, sealSuffix), sealMagic)
	if !ok || err != nil {
		return sealRecord{}, ok, err
	}
	if len(b) != 20 {
		return sealRecord{}, true, fmt.Errorf("storage: %s seal of %d: %w: length", dir, base, ErrCorrupt)
	}
	return sealRecord{
		Length:    int64(binary.BigEndian.Uint64(b)),
		EndOffset: int64(binary.BigEndian.Uint64(b[8:])),
		Epoch:     int32(binary.BigEndian.Uint32(b[16:])),
	}, true, nil
}

const lsoMagic = "KLS1"

func writeLSO(dir string, off int64) error {
	return writeFileAtomic(dir, lsoFileName, frame(lsoMagic, binary.BigEndian.AppendUint64(nil, uint64(off))))
}

func readLSO(dir string) (int64, error) {
	b, ok, err := readFramed(dir, lsoFileName, lsoMagic)
	if !ok || err != nil {
		return 0, err
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("storage: %s/%s: %w: length", dir, lsoFileName, ErrCorrupt)
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// encodeIndex and decodeIndex convert the .index file (24-byte entries).
func encodeIndex(entries []indexEntry) []byte {
	b := make([]byte, 0, len(entries)*indexEntrySize)
	for _, e := range entries {
		b = binary.BigEndian.AppendUint64(b, uint64(e.offset))
		b = binary.BigEndian.AppendUint64(b, uint64(e.pos))
		b = binary.BigEndian.AppendUint64(b, uint64(e.maxTsBefore))
	}
	return b
}

func decodeIndexEntry(b []byte) indexEntry {
	return indexEntry{
		offset:      int64(binary.BigEndian.Uint64(b)),
		pos:         int64(binary.BigEndian.Uint64(b[8:])),
		maxTsBefore: int64(binary.BigEndian.Uint64(b[16:])),
	}
}

func readIndexFile(path string) ([]indexEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b)%indexEntrySize != 0 {
		return nil, fmt.Errorf("%w: index size %d", ErrCorrupt, len(b))
	}
	out := make([]indexEntry, 0, len(b)/indexEntrySize)
	for ; len(b) > 0; b = b[indexEntrySize:] {
		out = append(out, decodeIndexEntry(b))
	}
	return out, nil
}

// readFull reads len(b) bytes at off or fails.
func readFull(f io.ReaderAt, b []byte, off int64) error {
	n, err := f.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
