package storage

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
)

// indexEntry is one sparse index entry (see the package doc for the file).
type indexEntry struct {
	offset      int64 // base offset of the indexed batch
	pos         int64 // its byte position in the segment
	maxTsBefore int64 // max batch maxTimestamp before it in the segment
}

// segment is one <base>.log with its index and summary. Guarded by Log.mu
// (reads under RLock, changes under Lock). Its files are FilePool files: the
// active segment's .log is pinned open for writing; a closed segment's files
// are opened on demand and may be closed by the pool between reads.
type segment struct {
	base  int64
	end   int64 // next offset after the last batch (== base when empty)
	size  int64 // bytes of whole batches: the limit every reader respects
	maxTs int64 // largest batch maxTimestamp, math.MinInt64 when empty
	// firstTs is the max timestamp of the segment's first batch, what
	// segment.ms counts from (math.MinInt64: empty, or not known for a
	// segment recovered at Open, which then rolls by size only).
	firstTs int64
	sealed  bool // a .seal file bounds it: never written again
	// syncedSize and syncedEnd: the bytes and the end offset the last
	// successful fsync of the active segment covered (what a failed fsync
	// cuts back to, without reading pages the failure may have lost).
	syncedSize, syncedEnd int64
	log                   *poolFile
	// The active segment keeps its index in mem (idx == nil), and so does a
	// closed segment whose index was read at Open; a segment closed by a
	// roll reads nIdx entries from idx on demand.
	mem  []indexEntry
	idx  *poolFile
	nIdx int
}

// readAt reads len(b) bytes of the segment's .log at off.
func (s *segment) readAt(b []byte, off int64) error {
	f, err := s.log.acquire()
	if err != nil {
		return err
	}
	defer s.log.release()
	return readFull(f, b, off)
}

// retire drops the segment's files (removed by retention, or the Log closed).
func (s *segment) retire() {
	s.log.retire()
	if s.idx != nil {
		s.idx.retire()
	}
}

func (s *segment) numEntries() int {
	if s.idx == nil {
		return len(s.mem)
	}
	return s.nIdx
}

// indexReader returns a reader of index entries, and a release to call when
// done with it (the index file stays open in between).
func (s *segment) indexReader() (entry func(i int) (indexEntry, error), release func(), err error) {
	if s.idx == nil {
		return func(i int) (indexEntry, error) { return s.mem[i], nil }, func() {}, nil
	}
	f, err := s.idx.acquire()
	if err != nil {
		return nil, nil, fmt.Errorf("storage: index of segment %d: %w", s.base, err)
	}
	return func(i int) (indexEntry, error) {
		var b [indexEntrySize]byte
		if err := readFull(f, b[:], int64(i)*indexEntrySize); err != nil {
			return indexEntry{}, fmt.Errorf("storage: read index of segment %d: %w", s.base, err)
		}
		return decodeIndexEntry(b[:]), nil
	}, s.idx.release, nil
}

// search returns the last entry for which before(entry) holds (entries are
// ordered so that before is true on a prefix), or the first entry.
func (s *segment) search(before func(indexEntry) bool) (indexEntry, error) {
	first := indexEntry{offset: s.base, maxTsBefore: math.MinInt64}
	n := s.numEntries()
	if n == 0 {
		return first, nil
	}
	entry, release, err := s.indexReader()
	if err != nil {
		return first, err
	}
	defer release()
	i := sort.Search(n, func(i int) bool {
		e, eerr := entry(i)
		if eerr != nil {
			err = eerr
			return true
		}
		return !before(e)
	})
	if err != nil {
		return first, err
	}
	if i > 0 {
		i--
	}
	return entry(i)
}

func (s *segment) readHeader(pos int64) (batchHeader, error) {
	var b [batchHeaderSize]byte
	if pos+batchHeaderSize > s.size {
		return batchHeader{}, fmt.Errorf("storage: segment %d: %w: header at %d past %d", s.base, ErrCorrupt, pos, s.size)
	}
	if err := s.readAt(b[:], pos); err != nil {
		return batchHeader{}, fmt.Errorf("storage: segment %d: read at %d: %w", s.base, pos, err)
	}
	h := parseHeader(b[:])
	if !h.sane() || pos+h.size() > s.size {
		return h, fmt.Errorf("storage: segment %d: %w: bad header at %d", s.base, ErrCorrupt, pos)
	}
	return h, nil
}

// findOffset returns the position of the batch holding offset.
func (s *segment) findOffset(offset int64) (int64, batchHeader, error) {
	e, err := s.search(func(e indexEntry) bool { return e.offset <= offset })
	if err != nil {
		return 0, batchHeader{}, err
	}
	for pos := e.pos; pos < s.size; {
		h, err := s.readHeader(pos)
		if err != nil {
			return 0, h, err
		}
		if h.lastOffset() >= offset {
			return pos, h, nil
		}
		pos += h.size()
	}
	return 0, batchHeader{}, fmt.Errorf("storage: segment %d: %w: offset %d not found", s.base, ErrOffsetOutOfRange, offset)
}

// findTime returns the first batch below hw whose maxTimestamp >= ts.
func (s *segment) findTime(ts, hw int64) (int64, batchHeader, bool, error) {
	e, err := s.search(func(e indexEntry) bool { return e.maxTsBefore < ts })
	if err != nil {
		return 0, batchHeader{}, false, err
	}
	for pos := e.pos; pos < s.size; {
		h, err := s.readHeader(pos)
		if err != nil {
			return 0, h, false, err
		}
		if h.BaseOffset >= hw {
			break
		}
		if h.MaxTimestamp >= ts {
			return pos, h, true, nil
		}
		pos += h.size()
	}
	return 0, batchHeader{}, false, nil
}

// scanResult is what a full scan of a segment learned.
type scanResult struct {
	valid   int64 // bytes of whole valid batches from the start
	end     int64 // next offset after them
	maxTs   int64
	entries []indexEntry
	stop    string // why the scan stopped before the limit ("" if it did not)
}

// scanSegment reads f[0:limit) batch by batch, checking framing, magic, CRC,
// offset contiguity from base and the epoch rule (minEpoch), and builds the
// index. It stops at the first batch that fails; everything before is valid.
func scanSegment(f io.ReaderAt, base, limit, interval int64, minEpoch func(int64) int32) (scanResult, error) {
	res := scanResult{end: base, maxTs: math.MinInt64}
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, limit), 256<<10)
	var buf []byte
	lastIdx := int64(-1)
	for res.valid < limit {
		if limit-res.valid < batchHeaderSize {
			res.stop = "torn header"
			break
		}
		if cap(buf) < batchHeaderSize {
			buf = make([]byte, batchHeaderSize, 64<<10)
		}
		buf = buf[:batchHeaderSize]
		if _, err := io.ReadFull(r, buf); err != nil {
			return res, fmt.Errorf("storage: scan segment %d: %w", base, err)
		}
		h := parseHeader(buf)
		if !h.sane() {
			res.stop = fmt.Sprintf("bad header (magic %d, length %d)", h.Magic, h.Length)
			break
		}
		if res.valid+h.size() > limit {
			res.stop = "torn batch"
			break
		}
		if int64(cap(buf)) < h.size() {
			nb := make([]byte, h.size())
			copy(nb, buf)
			buf = nb
		}
		buf = buf[:h.size()]
		if _, err := io.ReadFull(r, buf[batchHeaderSize:]); err != nil {
			return res, fmt.Errorf("storage: scan segment %d: %w", base, err)
		}
		switch {
		case batchCRC(buf) != h.CRC:
			res.stop = "crc mismatch"
		case h.BaseOffset != res.end:
			res.stop = fmt.Sprintf("offset %d where %d was expected", h.BaseOffset, res.end)
		case h.LeaderEpoch < minEpoch(h.BaseOffset):
			res.stop = fmt.Sprintf("batch of deposed leader epoch %d", h.LeaderEpoch)
		}
		if res.stop != "" {
			break
		}
		if lastIdx < 0 || res.valid-lastIdx >= interval {
			res.entries = append(res.entries, indexEntry{offset: h.BaseOffset, pos: res.valid, maxTsBefore: res.maxTs})
			lastIdx = res.valid
		}
		res.maxTs = max(res.maxTs, h.MaxTimestamp)
		res.end = h.lastOffset() + 1
		res.valid += h.size()
	}
	return res, nil
}

// walkIndexed checks a closed segment cheaply: the index must be consistent
// and the batch headers from its last entry must end exactly at limit. It
// returns ok=false (and no error) when a full scan is needed.
func walkIndexed(f io.ReaderAt, base, limit int64, entries []indexEntry, minEpoch func(int64) int32) (end, maxTs int64, ok bool) {
	if limit == 0 {
		return base, math.MinInt64, len(entries) == 0
	}
	if len(entries) == 0 || entries[0] != (indexEntry{offset: base, pos: 0, maxTsBefore: math.MinInt64}) {
		return 0, 0, false
	}
	for i := 1; i < len(entries); i++ {
		p, e := entries[i-1], entries[i]
		if e.offset <= p.offset || e.pos <= p.pos || e.pos >= limit || e.maxTsBefore < p.maxTsBefore {
			return 0, 0, false
		}
	}
	last := entries[len(entries)-1]
	pos, end, maxTs := last.pos, last.offset, last.maxTsBefore
	var b [batchHeaderSize]byte
	for pos < limit {
		if limit-pos < batchHeaderSize || readFull(f, b[:], pos) != nil {
			return 0, 0, false
		}
		h := parseHeader(b[:])
		if !h.sane() || pos+h.size() > limit || h.BaseOffset != end || h.LeaderEpoch < minEpoch(h.BaseOffset) {
			return 0, 0, false
		}
		maxTs = max(maxTs, h.MaxTimestamp)
		end = h.lastOffset() + 1
		pos += h.size()
	}
	return end, maxTs, true
}
