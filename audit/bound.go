package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
)

// Limits on what one entry may put in a line. A caller may send anything as
// a do_* argument (a 700 KB string, an object nested a million deep), and the
// refusal is audited: without bounds one line could outgrow maxLine, or the
// JSON nesting limit, and `audit verify` would reject the trail it wrote.
const (
	// MaxValueBytes bounds one string, number or object key.
	MaxValueBytes = 1 << 10
	// MaxDepth bounds the nesting of objects and arrays inside an entry.
	MaxDepth = 16
	// MaxContainerBytes bounds one nested object or array.
	MaxContainerBytes = 8 << 10
	// MaxEntryBytes bounds a whole entry (a line is this plus its "prev").
	MaxEntryBytes = 64 << 10
)

// Digest is what replaces a value over the limits: the SHA-256 and length of
// a string's UTF-8 bytes, or of the compact JSON encoding of anything else,
// so the original can still be matched against the trail.
type Digest struct {
	Truncated bool   `json:"truncated"`
	Type      string `json:"type"` // string, number, object or array
	Bytes     int    `json:"bytes"`
	SHA256    string `json:"sha256"`
}

// DigestOf is the Digest of the string s.
func DigestOf(s string) Digest {
	return digest("string", []byte(s))
}

func digest(typ string, b []byte) Digest {
	sum := sha256.Sum256(b)
	return Digest{Truncated: true, Type: typ, Bytes: len(b), SHA256: hex.EncodeToString(sum[:])}
}

// digestJSON summarises the JSON value raw. A string is digested as its
// decoded text, so a caller holding the original can recompute the digest.
func digestJSON(raw []byte) ([]byte, error) {
	var d Digest
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("audit: bound a string: %w", err)
		}
		d = DigestOf(s)
	case '{':
		d = digest("object", raw)
	case '[':
		d = digest("array", raw)
	default:
		d = digest("number", raw)
	}
	return json.Marshal(d)
}

// digestSize is about how long a Digest encodes: summarising anything
// shorter would make the line longer, not shorter.
var digestSize = func() int {
	b, _ := json.Marshal(digest("object", nil)) // a struct of strings and ints always encodes
	return len(b)
}()

// bound returns the entry body (compact JSON from encoding/json) with every
// value over the limits replaced by its Digest; a body within them is
// returned as is.
func bound(body []byte) ([]byte, error) {
	out, err := boundValue(body, 0)
	if err != nil {
		return nil, err
	}
	if len(out) > MaxEntryBytes {
		// many small members: nothing left to summarise one by one
		return digestJSON(body)
	}
	return out, nil
}

// member is one element of an object or array: its key (nil in arrays), its
// original value and the value as bounded so far.
type member struct {
	key, raw, val []byte
}

// boundValue bounds the JSON value raw found at nesting depth.
func boundValue(raw []byte, depth int) ([]byte, error) {
	switch raw[0] {
	case '{', '[':
	default:
		if len(raw) <= MaxValueBytes {
			return raw, nil // a string's encoding is never shorter than its text
		}
		if raw[0] == '"' {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, fmt.Errorf("audit: bound a string: %w", err)
			}
			if len(s) <= MaxValueBytes {
				return raw, nil
			}
		}
		return digestJSON(raw)
	}
	if depth >= MaxDepth {
		return digestJSON(raw)
	}
	ms, err := split(raw)
	if err != nil {
		return nil, err
	}
	changed := false
	for i := range ms {
		if len(ms[i].key) > MaxValueBytes+2 {
			return digestJSON(raw) // keys cannot be replaced by a digest; the object can
		}
		if ms[i].val, err = boundValue(ms[i].raw, depth+1); err != nil {
			return nil, err
		}
		changed = changed || !bytes.Equal(ms[i].val, ms[i].raw)
	}
	limit := MaxContainerBytes
	if depth == 0 {
		limit = MaxEntryBytes
	}
	size := encodedSize(ms)
	if size > limit {
		// summarise the largest members first, keeping as much as fits
		order := make([]int, len(ms))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return len(ms[b].val) - len(ms[a].val) })
		for _, i := range order {
			if size <= limit || len(ms[i].val) <= digestSize {
				break
			}
			d, err := digestJSON(ms[i].raw)
			if err != nil {
				return nil, err
			}
			size += len(d) - len(ms[i].val)
			ms[i].val, changed = d, true
		}
		if size > limit && depth > 0 {
			return digestJSON(raw)
		}
	}
	if !changed {
		return raw, nil
	}
	return join(raw[0], ms), nil
}

func encodedSize(ms []member) int {
	n := 2 + max(len(ms)-1, 0)
	for _, m := range ms {
		n += len(m.val)
		if m.key != nil {
			n += len(m.key) + 1
		}
	}
	return n
}

func join(open byte, ms []member) []byte {
	b := make([]byte, 0, encodedSize(ms))
	b = append(b, open)
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		if m.key != nil {
			b = append(b, m.key...)
			b = append(b, ':')
		}
		b = append(b, m.val...)
	}
	if open == '{' {
		return append(b, '}')
	}
	return append(b, ']')
}

// split cuts a compact JSON object or array into its members. It scans bytes
// rather than decoding, so it has no nesting limit of its own.
func split(raw []byte) ([]member, error) {
	var ms []member
	i := 1
	for i < len(raw)-1 {
		var m member
		if raw[0] == '{' {
			end, err := valueEnd(raw, i)
			if err != nil {
				return nil, err
			}
			if end >= len(raw) || raw[end] != ':' {
				return nil, fmt.Errorf("audit: malformed entry: no ':' after key at byte %d", i)
			}
			m.key, i = raw[i:end], end+1
		}
		end, err := valueEnd(raw, i)
		if err != nil {
			return nil, err
		}
		m.raw, i = raw[i:end], end
		ms = append(ms, m)
		if i < len(raw)-1 {
			if raw[i] != ',' {
				return nil, fmt.Errorf("audit: malformed entry: want ',' at byte %d", i)
			}
			i++
		}
	}
	return ms, nil
}

// valueEnd returns the index just past the JSON value starting at raw[i].
func valueEnd(raw []byte, i int) (int, error) {
	if i >= len(raw) {
		return 0, fmt.Errorf("audit: malformed entry: value missing at byte %d", i)
	}
	depth, inString := 0, false
	for j := i; j < len(raw); j++ {
		c := raw[j]
		switch {
		case inString:
			switch c {
			case '\\':
				j++
			case '"':
				inString = false
				if depth == 0 {
					return j + 1, nil
				}
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth == 0 {
				return j, nil // the end of a scalar that closes its container
			}
			if depth--; depth == 0 {
				return j + 1, nil
			}
		case depth == 0 && (c == ',' || c == ':'):
			return j, nil
		}
	}
	if depth != 0 || inString {
		return 0, fmt.Errorf("audit: malformed entry: unterminated value at byte %d", i)
	}
	return len(raw), nil
}
