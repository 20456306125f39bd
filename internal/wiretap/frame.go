package wiretap

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// maxKept is the largest frame the splitter buffers to decode. The group
// APIs' frames are small; a larger one of a tracked key is skipped and
// reported as a decode failure.
const maxKept = 1 << 20

// maxFrame is the largest size a Kafka frame may announce here; a larger
// (or negative) one means the stream is not Kafka, and the splitter stops
// reading it (the bytes still pass through).
const maxFrame = 1 << 30

// errNotKafka is the splitter's verdict on a stream whose sizes make no
// sense; it reads nothing more of that stream.
var errNotKafka = errors.New("wiretap: frame size out of range: not a Kafka stream")

// splitter cuts one direction of a Kafka connection into frames: a 4-byte
// big-endian size, then that many bytes. It is fed whatever each read
// returned (a frame may be split across reads, or a read hold several
// frames). Once a frame's first prefix bytes are in, want decides whether
// the frame is kept; a kept frame is handed whole (without its size) to
// frame, the others are skipped without buffering, so a large Produce or
// Fetch costs nothing. Runs on the goroutine copying that direction.
type splitter struct {
	prefix int                    // bytes want needs to decide
	want   func(head []byte) bool // keep this frame?
	frame  func(body []byte)      // a kept frame, whole
	fail   func(err error)        // a kept frame too large, or a broken stream

	size    [4]byte
	nsize   int    // bytes of size read
	left    int    // bytes of the current frame not yet read
	head    []byte // the current frame's first bytes, until decided
	decided bool
	keep    bool
	body    []byte // the kept frame so far
	broken  bool
}

// feed consumes one read's bytes.
func (s *splitter) feed(p []byte) {
	for len(p) > 0 && !s.broken {
		if s.nsize < 4 {
			n := copy(s.size[s.nsize:], p)
			s.nsize += n
			p = p[n:]
			if s.nsize < 4 {
				return
			}
			size := int32(binary.BigEndian.Uint32(s.size[:]))
			if size < 0 || size > maxFrame {
				s.broken = true
				s.fail(fmt.Errorf("%w (%d)", errNotKafka, size))
				return
			}
			s.left, s.head, s.decided, s.keep, s.body = int(size), s.head[:0], false, false, nil
			if s.left == 0 {
				s.decide()
				s.end()
			}
			continue
		}
		n := min(len(p), s.left)
		chunk := p[:n]
		p = p[n:]
		s.left -= n
		if !s.decided {
			need := s.prefix - len(s.head)
			take := min(need, len(chunk))
			s.head = append(s.head, chunk[:take]...)
			if len(s.head) == s.prefix || s.left == 0 {
				s.decide()
				// The head is part of the kept frame; the rest of chunk
				// follows it.
				if s.keep {
					s.body = append(s.body, chunk[take:]...)
				}
			}
		} else if s.keep {
			s.body = append(s.body, chunk...)
		}
		if s.left == 0 {
			s.end()
		}
	}
}

// decide asks want about the frame's head and starts its body when kept.
func (s *splitter) decide() {
	s.decided = true
	size := int(binary.BigEndian.Uint32(s.size[:]))
	s.keep = s.want(s.head)
	if s.keep && size > maxKept {
		s.keep = false
		s.fail(fmt.Errorf("wiretap: tracked frame of %d bytes, larger than %d: not decoded", size, maxKept))
	}
	if s.keep {
		s.body = make([]byte, 0, size)
		s.body = append(s.body, s.head...)
	}
}

// end closes the current frame and readies the next.
func (s *splitter) end() {
	if s.keep {
		s.frame(s.body)
	}
	s.nsize, s.body, s.keep = 0, nil, false
}
