package offsets

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// File names of group files (docs/offsets.md, "File names").
//
// A group id is stored under FileName(id) = enc(id) + ".json" where enc keeps the
// bytes a-z, 0-9, '-', '_' and '.' as they are (except a leading '.') and writes
// every other byte, uppercase letters included, as '%' and two lowercase hex digits.
// The empty id is "%". When enc(id) would be longer than maxEscaped bytes, the name
// is the first (at most) hashPrefix bytes of enc(id), cut at an escape boundary,
// then "%-", then the 64 hex digits of SHA-256(id); such a name cannot be turned
// back into the id, which the file's "group" field records instead.
//
// Properties: the output never contains '/', NUL or an uppercase letter (so names
// stay distinct on case-insensitive volumes), never starts with '.' (temp files
// do, and "." and ".." are impossible), is at most 207 bytes, and distinct ids give
// distinct names (exactly for the escaped form; by SHA-256 for the hashed form).
const (
	fileSuffix  = ".json"
	maxEscaped  = 200
	hashPrefix  = 136
	emptyName   = "%"
	hashMarker  = "%-"
	hexDigits   = "0123456789abcdef"
	tempPrefix  = ".tmp-"
	maxGroupLen = 32767 // a Kafka STRING
)

func safeByte(c byte, first bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		return true
	case c == '.':
		return !first
	}
	return false
}

// FileName returns the name (with the ".json" suffix) of the offsets file of group
// inside the offsets directory. It is a plain name, never a path.
func FileName(group string) string {
	if group == "" {
		return emptyName + fileSuffix
	}
	esc := make([]byte, 0, len(group)+8)
	for i := 0; i < len(group); i++ {
		c := group[i]
		if safeByte(c, i == 0) {
			esc = append(esc, c)
			continue
		}
		esc = append(esc, '%', hexDigits[c>>4], hexDigits[c&15])
	}
	if len(esc) <= maxEscaped {
		return string(esc) + fileSuffix
	}
	// Hashed form: a readable prefix cut at an escape boundary, then the digest.
	cut := hashPrefix
	for cut > 0 && (esc[cut-1] == '%' || esc[cut-2] == '%') {
		cut--
	}
	sum := sha256.Sum256([]byte(group))
	return string(esc[:cut]) + hashMarker + hex.EncodeToString(sum[:]) + fileSuffix
}

// GroupFromFileName inverts FileName. ok is false for names FileName never
// produces (temp files, foreign files, non-canonical escapes) and for hashed
// names, whose group id must be read from the file's "group" field.
func GroupFromFileName(name string) (string, bool) {
	esc, found := strings.CutSuffix(name, fileSuffix)
	if !found || esc == "" {
		return "", false
	}
	if esc == emptyName {
		return "", true
	}
	if strings.Contains(esc, hashMarker) || len(esc) > maxEscaped {
		return "", false
	}
	out := make([]byte, 0, len(esc))
	for i := 0; i < len(esc); i++ {
		c := esc[i]
		if c != '%' {
			if !safeByte(c, len(out) == 0) {
				return "", false
			}
			out = append(out, c)
			continue
		}
		if i+2 >= len(esc) {
			return "", false
		}
		hi, lo := strings.IndexByte(hexDigits, esc[i+1]), strings.IndexByte(hexDigits, esc[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		d := byte(hi<<4 | lo)
		if safeByte(d, len(out) == 0) {
			return "", false // canonical form writes that byte plainly
		}
		out = append(out, d)
		i += 2
	}
	return string(out), true
}
