package powerfs

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// memBacking is the in-memory twin of a backing file.
type memBacking struct{ b []byte }

func (m *memBacking) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, nil
	}
	return copy(p, m.b[off:]), nil
}

func (m *memBacking) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, end-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}

func (m *memBacking) Truncate(size int64) error {
	if size <= int64(len(m.b)) {
		m.b = m.b[:size]
	} else {
		m.b = append(m.b, make([]byte, size-int64(len(m.b)))...)
	}
	return nil
}

func readAll(t *testing.T, o *overlay, b backing) []byte {
	t.Helper()
	p := make([]byte, o.size+100)
	n, err := o.read(b, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	return p[:n]
}

// TestOverlayMatchesAModelAndPersistsExactlyTheSyncedState drives an
// overlay with random writes, truncates, persists and failed persists, and
// checks after every step that reads equal a plain byte-slice model, that
// the backing equals the model as of the last persist, and that a cut
// (dropping the overlay) leaves exactly that.
func TestOverlayMatchesAModelAndPersistsExactlyTheSyncedState(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		initial := make([]byte, rng.IntN(3*blockSize))
		for i := range initial {
			initial[i] = byte(rng.IntN(250) + 1)
		}
		mb := &memBacking{b: bytes.Clone(initial)}
		o := newOverlay(int64(len(initial)))
		model := bytes.Clone(initial)   // what readers must see
		durable := bytes.Clone(initial) // what the backing must hold
		lost := false                   // a failed persist happened: the backing may lag the model in lost blocks
		for step := range 60 {
			switch op := rng.IntN(10); {
			case op < 5:
				off := rng.Int64N(4 * blockSize)
				p := make([]byte, rng.IntN(2*blockSize)+1)
				for i := range p {
					p[i] = byte(rng.IntN(250) + 1)
				}
				if err := o.write(mb, p, off); err != nil {
					t.Fatal(err)
				}
				if end := off + int64(len(p)); end > int64(len(model)) {
					model = append(model, make([]byte, end-int64(len(model)))...)
				}
				copy(model[off:], p)
			case op < 7:
				size := rng.Int64N(5 * blockSize)
				o.truncate(size)
				if size <= int64(len(model)) {
					model = model[:size]
				} else {
					model = append(model, make([]byte, size-int64(len(model)))...)
				}
			case op < 9:
				if err := o.persist(mb); err != nil {
					t.Fatal(err)
				}
				durable = bytes.Clone(model)
			default:
				o.fail()
				lost = true
			}
			if got := readAll(t, o, mb); !bytes.Equal(got, model) {
				t.Fatalf("seed %d step %d: read %d bytes differing from the model's %d", seed, step, len(got), len(model))
			}
			if !lost && !bytes.Equal(mb.b, durable) {
				t.Fatalf("seed %d step %d: the backing differs from the last persisted state", seed, step)
			}
		}
		if lost {
			continue
		}
		// The cut: a fresh overlay over the backing reads the durable state.
		if got := readAll(t, newOverlay(int64(len(mb.b))), mb); !bytes.Equal(got, durable) {
			t.Fatalf("seed %d: after the cut %d bytes, want the %d persisted", seed, len(got), len(durable))
		}
	}
}

// TestOverlayFailedSyncLosesThePendingBlocks: after a failed fsync the data
// stays readable, a later successful persist does not write it, and a
// block written again is persisted whole.
func TestOverlayFailedSyncLosesThePendingBlocks(t *testing.T) {
	mb := &memBacking{}
	o := newOverlay(0)
	a := bytes.Repeat([]byte("a"), blockSize)
	b := bytes.Repeat([]byte("b"), blockSize)
	if err := o.write(mb, a, 0); err != nil {
		t.Fatal(err)
	}
	o.fail()
	if err := o.write(mb, b, blockSize); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, o, mb); !bytes.Equal(got, append(bytes.Clone(a), b...)) {
		t.Fatalf("before the persist: read %q…", got[:8])
	}
	if err := o.persist(mb); err != nil {
		t.Fatal(err)
	}
	want := append(make([]byte, blockSize), b...)
	if !bytes.Equal(mb.b, want) {
		t.Fatalf("backing after the persist: first block %q…, want zeros (lost)", mb.b[:8])
	}
	if o.clean() {
		t.Fatal("an overlay with a lost block reports clean")
	}
	if got := readAll(t, o, mb); !bytes.Equal(got[:blockSize], a) {
		t.Fatal("the lost block is no longer readable before the cut")
	}
}
