package offsets

import (
	"unicode/utf8"
)

// parseCanonical reads a group file in the shape this package writes (see
// encodeFile) without reflection: about ten times faster than encoding/json
// on a 1000-partition file, which is what a moved group's first request
// waits for. It gives up (ok=false) on anything it does not read exactly as
// encoding/json would (escaped strings, non-integer numbers, a pending
// section, unknown fields, trailing data); decodeFile then uses
// encoding/json, so the result never depends on which path ran
// (FuzzDecode checks both agree).
func parseCanonical(data []byte) (doc fileDoc, ok bool) {
	p := fastParser{b: data}
	if !p.byte('{') {
		return fileDoc{}, false
	}
	if p.peek('}') {
		p.i++
		return doc, p.end()
	}
	for {
		key, ok := p.str()
		if !ok || !p.byte(':') {
			return fileDoc{}, false
		}
		switch key {
		case "group":
			g, ok := p.str()
			if !ok {
				return fileDoc{}, false
			}
			doc.Group = &g
		case "offsets":
			doc.Offsets = map[string]int64{}
			if !p.object(func(k string) bool {
				n, ok := p.int()
				doc.Offsets[k] = n
				return ok
			}) {
				return fileDoc{}, false
			}
		case "metadata":
			doc.Metadata = map[string]string{}
			if !p.object(func(k string) bool {
				v, ok := p.str()
				doc.Metadata[k] = v
				return ok
			}) {
				return fileDoc{}, false
			}
		case "details":
			doc.Details = map[string][]int64{}
			if !p.object(func(k string) bool {
				if !p.byte('[') {
					return false
				}
				var vals []int64
				if p.peek(']') {
					p.i++
					doc.Details[k] = []int64{}
					return true
				}
				for {
					n, ok := p.int()
					if !ok {
						return false
					}
					vals = append(vals, n)
					if p.peek(',') {
						p.i++
						continue
					}
					doc.Details[k] = vals
					return p.byte(']')
				}
			}) {
				return fileDoc{}, false
			}
		case "fence":
			f := &fileFence{}
			if !p.object(func(k string) bool {
				n, ok := p.int()
				switch k {
				case "controller_epoch":
					f.ControllerEpoch = n
				case "assignment_version":
					f.AssignmentVersion = n
				default:
					return false
				}
				return ok
			}) {
				return fileDoc{}, false
			}
			doc.Fence = f
		case "retention":
			r := &retentionDoc{}
			if !p.object(func(k string) bool {
				switch k {
				case "protocolType":
					v, ok := p.str()
					r.ProtocolType = v
					return ok
				case "emptySince":
					n, ok := p.int()
					r.EmptySince = n
					return ok
				case "subscribed":
					if !p.byte('[') {
						return false
					}
					r.Subscribed = []string{}
					if p.peek(']') {
						p.i++
						return true
					}
					for {
						v, ok := p.str()
						if !ok {
							return false
						}
						r.Subscribed = append(r.Subscribed, v)
						if p.peek(',') {
							p.i++
							continue
						}
						return p.byte(']')
					}
				}
				return false
			}) {
				return fileDoc{}, false
			}
			doc.Retention = r
		default:
			return fileDoc{}, false // pending, or a field of a newer writer
		}
		if p.peek(',') {
			p.i++
			continue
		}
		if !p.byte('}') {
			return fileDoc{}, false
		}
		return doc, p.end()
	}
}

type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\n' || p.b[p.i] == '\t' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *fastParser) peek(c byte) bool {
	p.ws()
	return p.i < len(p.b) && p.b[p.i] == c
}

func (p *fastParser) byte(c byte) bool {
	if !p.peek(c) {
		return false
	}
	p.i++
	return true
}

// end accepts only trailing white space.
func (p *fastParser) end() bool {
	p.ws()
	return p.i == len(p.b)
}

// str reads a string without escapes, in valid UTF-8.
func (p *fastParser) str() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	start := p.i
	ascii := true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			if !ascii && !utf8.Valid(s) {
				return "", false
			}
			return string(s), true
		case c == '\\' || c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		p.i++
	}
	return "", false
}

// int reads an integer as encoding/json would into an int64.
func (p *fastParser) int() (int64, bool) {
	p.ws()
	neg := false
	if p.i < len(p.b) && p.b[p.i] == '-' {
		neg = true
		p.i++
	}
	start := p.i
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		d := uint64(p.b[p.i] - '0')
		if n > (1<<63-1)/10 {
			return 0, false
		}
		n = n*10 + d
		p.i++
	}
	digits := p.i - start
	if digits == 0 || (digits > 1 && p.b[start] == '0') {
		return 0, false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	if n > 1<<63-1 && !(neg && n == 1<<63) {
		return 0, false
	}
	if neg {
		return -int64(n), true
	}
	return int64(n), true
}

// object reads {"key": value, ...}, calling val for each value.
func (p *fastParser) object(val func(key string) bool) bool {
	if !p.byte('{') {
		return false
	}
	if p.peek('}') {
		p.i++
		return true
	}
	for {
		k, ok := p.str()
		if !ok || !p.byte(':') || !val(k) {
			return false
		}
		if p.peek(',') {
			p.i++
			continue
		}
		return p.byte('}')
	}
}
