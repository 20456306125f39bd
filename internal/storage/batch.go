package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
)

// Record batch v2 header layout (big-endian). baseOffset and batchLength
// (logOverhead bytes) are not counted by batchLength; the CRC covers
// attributes to the end of the batch, so baseOffset and
// partitionLeaderEpoch can be rewritten without recomputing it.
const (
	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offBaseTimestamp   = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57
	batchHeaderSize    = 61 // also where the records start
	logOverhead        = 12

	attrCodecMask     = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20

	maxCodec = 4 // 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd

	// maxStoredBatch bounds the length field recovery accepts from disk, so a
	// corrupt length cannot make it allocate gigabytes.
	maxStoredBatch = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// batchHeader is the decoded fixed part of a v2 batch.
type batchHeader struct {
	BaseOffset      int64
	Length          int32 // batchLength: bytes after the field
	LeaderEpoch     int32
	Magic           int8
	CRC             uint32
	Attributes      int16
	LastOffsetDelta int32
	BaseTimestamp   int64
	MaxTimestamp    int64
	ProducerID      int64
	ProducerEpoch   int16
	BaseSequence    int32
	RecordCount     int32
}

// parseHeader decodes the header at the front of b; len(b) >= batchHeaderSize.
func parseHeader(b []byte) batchHeader {
	be := binary.BigEndian
	return batchHeader{
		BaseOffset:      int64(be.Uint64(b[offBaseOffset:])),
		Length:          int32(be.Uint32(b[offBatchLength:])),
		LeaderEpoch:     int32(be.Uint32(b[offLeaderEpoch:])),
		Magic:           int8(b[offMagic]),
		CRC:             be.Uint32(b[offCRC:]),
		Attributes:      int16(be.Uint16(b[offAttributes:])),
		LastOffsetDelta: int32(be.Uint32(b[offLastOffsetDelta:])),
		BaseTimestamp:   int64(be.Uint64(b[offBaseTimestamp:])),
		MaxTimestamp:    int64(be.Uint64(b[offMaxTimestamp:])),
		ProducerID:      int64(be.Uint64(b[offProducerID:])),
		ProducerEpoch:   int16(be.Uint16(b[offProducerEpoch:])),
		BaseSequence:    int32(be.Uint32(b[offBaseSequence:])),
		RecordCount:     int32(be.Uint32(b[offRecordCount:])),
	}
}

func (h batchHeader) size() int64       { return logOverhead + int64(h.Length) }
func (h batchHeader) lastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }
func (h batchHeader) codec() int        { return int(h.Attributes & attrCodecMask) }
func (h batchHeader) logAppendTime() bool {
	return h.Attributes&attrLogAppendTime != 0
}
func (h batchHeader) lastSequence() int32 { return seqAdd(h.BaseSequence, h.LastOffsetDelta) }

// sane reports whether a header read from disk can be walked over: v2,
// a plausible length, a non-negative offset delta.
func (h batchHeader) sane() bool {
	return h.Magic == 2 && h.Length >= batchHeaderSize-logOverhead &&
		h.Length <= maxStoredBatch && h.LastOffsetDelta >= 0
}

func batchCRC(b []byte) uint32 { return crc32.Checksum(b[offAttributes:], castagnoli) }

// seqAdd adds d to sequence s, wrapping from MaxInt32 to 0 like Kafka does.
func seqAdd(s, d int32) int32 {
	return int32((int64(s) + int64(d)) % (math.MaxInt32 + 1))
}

// validateBatch checks the batch at the front of b as a client sent it and
// returns its header. maxBytes <= 0 means no size limit.
func validateBatch(b []byte, maxBytes int32) (batchHeader, error) {
	if len(b) < offMagic+1 {
		return batchHeader{}, fmt.Errorf("%w: %d trailing bytes are not a batch", ErrCorrupt, len(b))
	}
	length := int32(binary.BigEndian.Uint32(b[offBatchLength:]))
	if length < offMagic+1-logOverhead {
		return batchHeader{}, fmt.Errorf("%w: batch length %d", ErrCorrupt, length)
	}
	size := logOverhead + int64(length)
	if size > int64(len(b)) {
		return batchHeader{}, fmt.Errorf("%w: batch length %d runs past the %d bytes received", ErrCorrupt, length, len(b))
	}
	if magic := int8(b[offMagic]); magic != 2 {
		return batchHeader{}, fmt.Errorf("%w: magic %d", ErrUnsupportedMagic, magic)
	}
	if size < batchHeaderSize {
		return batchHeader{}, fmt.Errorf("%w: batch length %d is shorter than a v2 header", ErrCorrupt, length)
	}
	if maxBytes > 0 && size > int64(maxBytes) {
		return batchHeader{}, fmt.Errorf("%w: batch of %d bytes, limit %d", ErrTooLarge, size, maxBytes)
	}
	b = b[:size]
	h := parseHeader(b)
	if got := batchCRC(b); got != h.CRC {
		return h, fmt.Errorf("%w: crc %08x, batch says %08x", ErrCorrupt, got, h.CRC)
	}
	if h.Attributes&attrControl != 0 {
		return h, fmt.Errorf("%w: control batches are written by the broker only", ErrInvalidRecord)
	}
	if h.codec() > maxCodec {
		return h, fmt.Errorf("%w: compression codec %d", ErrInvalidRecord, h.codec())
	}
	if h.RecordCount < 1 {
		return h, fmt.Errorf("%w: record count %d", ErrInvalidRecord, h.RecordCount)
	}
	if h.LastOffsetDelta != h.RecordCount-1 {
		return h, fmt.Errorf("%w: lastOffsetDelta %d with %d records", ErrInvalidRecord, h.LastOffsetDelta, h.RecordCount)
	}
	if h.ProducerID >= 0 && h.BaseSequence < 0 {
		return h, fmt.Errorf("%w: producer %d sent base sequence %d", ErrInvalidRecord, h.ProducerID, h.BaseSequence)
	}
	if h.codec() == 0 {
		if err := eachRecord(b[batchHeaderSize:], h.RecordCount, nil); err != nil {
			return h, fmt.Errorf("%w: %w", ErrInvalidRecord, err)
		}
	}
	return h, nil
}

// eachRecord walks the uncompressed records area of a batch holding count
// records, checking every record's framing and that offsetDelta counts 0, 1,
// 2...; fn (may be nil) sees each record's timestampDelta and offsetDelta and
// stops the walk by returning false.
//
// Record: length varint | attributes int8 | timestampDelta varlong |
// offsetDelta varint | keyLength varint | key | valueLength varint | value |
// headerCount varint | headers (keyLength varint | key | valueLength varint | value).
func eachRecord(b []byte, count int32, fn func(tsDelta, offDelta int64) bool) error {
	for i := int32(0); i < count; i++ {
		n, k := binary.Varint(b)
		if k <= 0 || n < 1 || n > int64(len(b)-k) {
			return fmt.Errorf("record %d: bad length", i)
		}
		r := reader{b: b[k : k+int(n)]}
		b = b[k+int(n):]
		r.skip(1) // attributes
		tsDelta := r.varint()
		offDelta := r.varint()
		r.bytes() // key
		r.bytes() // value
		if nh := r.varint(); nh < 0 {
			r.bad = true
		} else {
			for j := int64(0); j < nh && !r.bad; j++ {
				if kl := r.varint(); kl < 0 {
					r.bad = true
				} else {
					r.skip(int(kl))
				}
				r.bytes()
			}
		}
		if r.bad || len(r.b) != 0 {
			return fmt.Errorf("record %d: malformed", i)
		}
		if offDelta != int64(i) {
			return fmt.Errorf("record %d: offsetDelta %d", i, offDelta)
		}
		if fn != nil && !fn(tsDelta, offDelta) {
			return nil
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%d bytes after record %d", len(b), count)
	}
	return nil
}

// reader consumes varint-framed fields; bad latches on the first error.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) skip(n int) {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return
	}
	r.b = r.b[n:]
}

func (r *reader) varint() int64 {
	if r.bad {
		return 0
	}
	v, k := binary.Varint(r.b)
	if k <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[k:]
	return v
}

// bytes skips a varint-length-prefixed field; -1 is null.
func (r *reader) bytes() {
	n := r.varint()
	if n < -1 || n > math.MaxInt32 {
		r.bad = true
		return
	}
	if n > 0 {
		r.skip(int(n))
	}
}
