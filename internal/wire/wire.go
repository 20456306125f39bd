// Package wire owns Kafka framing, request headers, and the table of API
// versions kaas advertises. It holds no state and must not import other kaas
// packages: everything above it (the broker) decodes through it.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultMaxFrame is the largest request frame accepted unless configured
// otherwise (Kafka's socket.request.max.bytes default, 100 MiB).
const DefaultMaxFrame = 100 << 20

var (
	// ErrFrameTooLarge is returned for a size prefix beyond the limit or negative.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrMalformed is returned for a frame whose header or body cannot be decoded.
	ErrMalformed = errors.New("wire: malformed request")
	// ErrUnknownKey is returned for an API key kaas does not serve.
	ErrUnknownKey = errors.New("wire: unknown api key")
	// ErrUnsupportedVersion is returned for a version outside the advertised range.
	ErrUnsupportedVersion = errors.New("wire: unsupported version")
)

// ReadFrame reads one size-prefixed frame. buf is reused when large enough.
func ReadFrame(r io.Reader, max int32, buf []byte) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || n > max {
		return nil, fmt.Errorf("%w: %d bytes (max %d)", ErrFrameTooLarge, n, max)
	}
	if n < 8 { // key, version, correlation id
		return nil, fmt.Errorf("%w: frame of %d bytes is shorter than a header", ErrMalformed, n)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// Header is a decoded request header (v1 or v2).
type Header struct {
	Key           int16
	Version       int16
	CorrelationID int32
	ClientID      string
}

// Request is a decoded request: header plus body.
type Request struct {
	Header
	Body kmsg.Request
}

// PeekHeader decodes the fixed part of a header: key, version, correlation id.
// It never fails on a frame of at least 8 bytes.
func PeekHeader(frame []byte) Header {
	return Header{
		Key:           int16(binary.BigEndian.Uint16(frame[0:])),
		Version:       int16(binary.BigEndian.Uint16(frame[2:])),
		CorrelationID: int32(binary.BigEndian.Uint32(frame[4:])),
	}
}

// Decode parses a whole request frame. The returned error wraps one of
// ErrUnknownKey, ErrUnsupportedVersion or ErrMalformed; the header is valid
// (key, version, correlation id) whenever len(frame) >= 8.
//
// The body's byte slices alias frame: the caller must not reuse frame while
// the request is alive.
func Decode(frame []byte, supported Supported) (Request, error) {
	h := PeekHeader(frame)
	rng, ok := supported(h.Key)
	if !ok {
		return Request{Header: h}, fmt.Errorf("%w: %d", ErrUnknownKey, h.Key)
	}
	if h.Version < rng.Min || h.Version > rng.Max {
		return Request{Header: h}, fmt.Errorf("%w: %s v%d (supported %d-%d)", ErrUnsupportedVersion, Name(h.Key), h.Version, rng.Min, rng.Max)
	}
	body := kmsg.RequestForKey(h.Key)
	body.SetVersion(h.Version)
	r := kbin.Reader{Src: frame[8:]}
	cid := r.NullableString()
	if cid != nil {
		h.ClientID = *cid
	}
	if body.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if !r.Ok() {
		return Request{Header: h}, fmt.Errorf("%w: %s v%d header", ErrMalformed, Name(h.Key), h.Version)
	}
	if err := body.ReadFrom(r.Src); err != nil {
		return Request{Header: h}, fmt.Errorf("%w: %s v%d: %w", ErrMalformed, Name(h.Key), h.Version, err)
	}
	return Request{Header: h, Body: body}, nil
}

// AppendResponse appends a whole response frame (size, correlation id, header
// tags when flexible, body). ApiVersions always uses the v0 response header.
func AppendResponse(dst []byte, corr int32, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[start+4:], uint32(corr))
	if resp.IsFlexible() && resp.Key() != kmsg.ApiVersions.Int16() {
		dst = append(dst, 0) // empty tagged fields
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// Name is the API's name for logs, or "api-N" for an unknown key.
func Name(key int16) string {
	if n := kmsg.NameForKey(key); n != "" {
		return n
	}
	return fmt.Sprintf("api-%d", key)
}
