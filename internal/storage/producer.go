package storage

import (
	"encoding/binary"
	"fmt"
)

// producerBatchesKept is how many recent batches per producer are remembered
// for duplicate detection (Kafka's max.in.flight.requests.per.connection bound).
const producerBatchesKept = 5

// producerBatch is one remembered batch of an idempotent producer.
type producerBatch struct {
	firstSeq, lastSeq       int32
	firstOffset, lastOffset int64
}

// producerState is what the log knows about one producer id.
type producerState struct {
	epoch   int16
	batches []producerBatch // oldest first, at most producerBatchesKept
	// txn is the producer's open transaction in this partition (nil when
	// none): from its first transactional batch until its marker.
	txn *txnState
}

// txnState is a producer's open transaction in this partition.
type txnState struct {
	firstOffset int64
}

func (p *producerState) clone() *producerState {
	if p == nil {
		return nil
	}
	c := *p
	c.batches = append([]producerBatch(nil), p.batches...)
	if p.txn != nil {
		t := *p.txn
		c.txn = &t
	}
	return &c
}

// checkProducer decides an idempotent batch (h.ProducerID >= 0) against the
// producer's current state st (nil if unknown). It returns the original batch
// when h is a duplicate of a remembered one.
func checkProducer(st *producerState, h *batchHeader) (*producerBatch, error) {
	last := h.lastSequence()
	switch {
	case st == nil:
		if h.BaseSequence != 0 {
			return nil, fmt.Errorf("%w: new producer %d must start at sequence 0, sent %d", ErrOutOfOrderSequence, h.ProducerID, h.BaseSequence)
		}
		return nil, nil
	case h.ProducerEpoch < st.epoch:
		return nil, fmt.Errorf("%w: producer %d epoch %d, log has %d", ErrInvalidProducerEpoch, h.ProducerID, h.ProducerEpoch, st.epoch)
	case h.ProducerEpoch > st.epoch:
		if h.BaseSequence != 0 {
			return nil, fmt.Errorf("%w: producer %d new epoch %d must start at sequence 0, sent %d", ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, h.BaseSequence)
		}
		return nil, nil
	}
	for i := range st.batches {
		if b := &st.batches[i]; b.firstSeq == h.BaseSequence && b.lastSeq == last {
			return b, nil
		}
	}
	if n := len(st.batches); n > 0 {
		if want := seqAdd(st.batches[n-1].lastSeq, 1); h.BaseSequence != want {
			return nil, fmt.Errorf("%w: producer %d epoch %d sent sequence %d, expected %d", ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, h.BaseSequence, want)
		}
	} else if h.BaseSequence != 0 {
		return nil, fmt.Errorf("%w: producer %d sent sequence %d, expected 0", ErrOutOfOrderSequence, h.ProducerID, h.BaseSequence)
	}
	return nil, nil
}

// applyProducer records batch h (already stored at h.BaseOffset) in st, which
// it may modify, and returns the new state. A new epoch starts afresh.
func applyProducer(st *producerState, h *batchHeader) *producerState {
	if st == nil || h.ProducerEpoch != st.epoch {
		var open *txnState
		if st != nil {
			open = st.txn // an open transaction ends only with its marker
		}
		st = &producerState{epoch: h.ProducerEpoch, txn: open}
	}
	if h.Attributes&attrTransactional != 0 && st.txn == nil {
		st.txn = &txnState{firstOffset: h.BaseOffset}
	}
	st.batches = append(st.batches, producerBatch{
		firstSeq: h.BaseSequence, lastSeq: h.lastSequence(),
		firstOffset: h.BaseOffset, lastOffset: h.lastOffset(),
	})
	if n := len(st.batches); n > producerBatchesKept {
		st.batches = append(st.batches[:0], st.batches[n-producerBatchesKept:]...)
	}
	return st
}

// producerSnapshot is the content of the producer-state file.
type producerSnapshot struct {
	coverEnd  int64  // log end offset the snapshot covers
	lastBase  int64  // base offset of the last batch below coverEnd (-1 if none)
	lastCRC   uint32 // that batch's CRC
	producers map[int64]*producerState
	aborted   []AbortedTxn // aborted transactions still in the log
}

const snapshotMagic = "KPS2"

func encodeSnapshot(s producerSnapshot) []byte {
	be := binary.BigEndian
	b := be.AppendUint64(nil, uint64(s.coverEnd))
	b = be.AppendUint64(b, uint64(s.lastBase))
	b = be.AppendUint32(b, s.lastCRC)
	b = be.AppendUint32(b, uint32(len(s.producers)))
	for pid, st := range s.producers {
		b = be.AppendUint64(b, uint64(pid))
		b = be.AppendUint16(b, uint16(st.epoch))
		b = append(b, byte(len(st.batches)))
		for _, x := range st.batches {
			b = be.AppendUint32(b, uint32(x.firstSeq))
			b = be.AppendUint32(b, uint32(x.lastSeq))
			b = be.AppendUint64(b, uint64(x.firstOffset))
			b = be.AppendUint64(b, uint64(x.lastOffset))
		}
		if st.txn != nil {
			b = append(b, 1)
			b = be.AppendUint64(b, uint64(st.txn.firstOffset))
		} else {
			b = append(b, 0)
		}
	}
	b = be.AppendUint32(b, uint32(len(s.aborted)))
	for _, a := range s.aborted {
		b = be.AppendUint64(b, uint64(a.ProducerID))
		b = be.AppendUint64(b, uint64(a.FirstOffset))
		b = be.AppendUint64(b, uint64(a.LastOffset))
	}
	return frame(snapshotMagic, b)
}

func decodeSnapshot(raw []byte) (producerSnapshot, error) {
	b, err := unframe(snapshotMagic, raw)
	if err != nil {
		return producerSnapshot{}, err
	}
	be := binary.BigEndian
	bad := fmt.Errorf("%w: producer snapshot truncated", ErrCorrupt)
	if len(b) < 24 {
		return producerSnapshot{}, bad
	}
	s := producerSnapshot{
		coverEnd:  int64(be.Uint64(b)),
		lastBase:  int64(be.Uint64(b[8:])),
		lastCRC:   be.Uint32(b[16:]),
		producers: map[int64]*producerState{},
	}
	n := be.Uint32(b[20:])
	b = b[24:]
	for i := uint32(0); i < n; i++ {
		if len(b) < 11 {
			return producerSnapshot{}, bad
		}
		pid := int64(be.Uint64(b))
		st := &producerState{epoch: int16(be.Uint16(b[8:]))}
		k := int(b[10])
		b = b[11:]
		if k > producerBatchesKept || len(b) < k*24 {
			return producerSnapshot{}, bad
		}
		for j := 0; j < k; j++ {
			st.batches = append(st.batches, producerBatch{
				firstSeq: int32(be.Uint32(b)), lastSeq: int32(be.Uint32(b[4:])),
				firstOffset: int64(be.Uint64(b[8:])), lastOffset: int64(be.Uint64(b[16:])),
			})
			b = b[24:]
		}
		if len(b) < 1 {
			return producerSnapshot{}, bad
		}
		if b[0] == 1 {
			if len(b) < 9 {
				return producerSnapshot{}, bad
			}
			st.txn = &txnState{firstOffset: int64(be.Uint64(b[1:]))}
			b = b[9:]
		} else {
			b = b[1:]
		}
		s.producers[pid] = st
	}
	if len(b) < 4 {
		return producerSnapshot{}, bad
	}
	na := be.Uint32(b)
	b = b[4:]
	if uint64(len(b)) < uint64(na)*24 {
		return producerSnapshot{}, bad
	}
	for i := uint32(0); i < na; i++ {
		s.aborted = append(s.aborted, AbortedTxn{ProducerID: int64(be.Uint64(b)),
			FirstOffset: int64(be.Uint64(b[8:])), LastOffset: int64(be.Uint64(b[16:]))})
		b = b[24:]
	}
	if len(b) != 0 {
		return producerSnapshot{}, fmt.Errorf("%w: producer snapshot has trailing bytes", ErrCorrupt)
	}
	return s, nil
}
