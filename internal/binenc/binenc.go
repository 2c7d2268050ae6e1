// Package binenc is the compact binary encoding of physmcpd's records (the
// state store's and the in-memory idempotency records): length-prefixed
// strings, varints, times to the nanosecond, and JSON-like values that
// decode as a JSON round trip would leave them. Append functions write; a
// Decoder reads back, its first error sticking.
package binenc

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Value tags.
const (
	vNil = iota
	vFalse
	vTrue
	vNumber // float64 bits, little endian
	vString
	vJSON // anything else, as JSON
)

// ErrTruncated is a read past the end.
var ErrTruncated = errors.New("truncated")

// AppendValue encodes a JSON-like value; numbers become float64, as a JSON
// round trip would make them, and other types go as JSON.
func AppendValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, vNil), nil
	case bool:
		if x {
			return append(b, vTrue), nil
		}
		return append(b, vFalse), nil
	case float64:
		return appendNumber(b, x), nil
	case int:
		return appendNumber(b, float64(x)), nil
	case int64:
		return appendNumber(b, float64(x)), nil
	case int32:
		return appendNumber(b, float64(x)), nil
	case uint16:
		return appendNumber(b, float64(x)), nil
	case uint32:
		return appendNumber(b, float64(x)), nil
	case string:
		return AppendString(append(b, vString), x), nil
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return AppendBytes(append(b, vJSON), j), nil
}

func appendNumber(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(append(b, vNumber), math.Float64bits(f))
}

// AppendString appends s with its length.
func AppendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// AppendBytes appends s with its length.
func AppendBytes(b, s []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// AppendStrings appends ss with their count.
func AppendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = AppendString(b, s)
	}
	return b
}

// AppendTime keeps t to the nanosecond, the zero time included (as a JSON
// round trip did); it decodes in UTC.
func AppendTime(b []byte, t time.Time) []byte {
	return binary.AppendUvarint(binary.AppendVarint(b, t.Unix()), uint64(t.Nanosecond()))
}

// Decoder reads what the append functions wrote from B, at Off. After the
// first error every read returns a zero value.
type Decoder struct {
	B   []byte
	Off int
	err error
}

// Err is the first error met, if any.
func (d *Decoder) Err() error { return d.err }

// Fail records err (unless an error came first) and stops reading.
func (d *Decoder) Fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.Off = len(d.B)
}

// Done fails unless every byte was read.
func (d *Decoder) Done() error {
	if d.err == nil && d.Off != len(d.B) {
		d.err = fmt.Errorf("%d bytes too many", len(d.B)-d.Off)
	}
	return d.err
}

// Take returns the next n bytes (not copied).
func (d *Decoder) Take(n int) []byte {
	if d.err != nil || n < 0 || len(d.B)-d.Off < n {
		d.Fail(ErrTruncated)
		return nil
	}
	s := d.B[d.Off : d.Off+n]
	d.Off += n
	return s
}

func (d *Decoder) Byte() byte {
	if s := d.Take(1); s != nil {
		return s[0]
	}
	return 0
}

func (d *Decoder) Uvarint() uint64 { return readVarint(d, binary.Uvarint) }

func (d *Decoder) Varint() int64 { return readVarint(d, binary.Varint) }

// readVarint reads one varint with read (binary.Uvarint or binary.Varint).
func readVarint[T uint64 | int64](d *Decoder, read func([]byte) (T, int)) T {
	if d.err != nil {
		return 0
	}
	v, n := read(d.B[d.Off:])
	if n <= 0 {
		d.Fail(ErrTruncated)
		return 0
	}
	d.Off += n
	return v
}

// Bytes reads what AppendBytes wrote (not copied).
func (d *Decoder) Bytes() []byte {
	n := d.Uvarint()
	if n > uint64(len(d.B)) {
		d.Fail(ErrTruncated)
		return nil
	}
	return d.Take(int(n))
}

func (d *Decoder) String() string { return string(d.Bytes()) }

// Strings reads what AppendStrings wrote; none is nil.
func (d *Decoder) Strings() []string {
	n := d.Uvarint()
	if n > uint64(len(d.B)) {
		d.Fail(ErrTruncated)
		return nil
	}
	var ss []string
	for range n {
		ss = append(ss, d.String())
	}
	return ss
}

func (d *Decoder) Time() time.Time {
	sec := d.Varint()
	nsec := d.Uvarint()
	if nsec >= 1e9 {
		d.Fail(errors.New("bad time"))
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

// Value reads what AppendValue wrote.
func (d *Decoder) Value() any {
	switch tag := d.Byte(); tag {
	case vNil:
		return nil
	case vFalse:
		return false
	case vTrue:
		return true
	case vNumber:
		if s := d.Take(8); s != nil {
			return math.Float64frombits(binary.LittleEndian.Uint64(s))
		}
	case vString:
		return d.String()
	case vJSON:
		var v any
		if j := d.Bytes(); d.err == nil {
			if err := json.Unmarshal(j, &v); err != nil {
				d.Fail(err)
			}
		}
		return v
	default:
		d.Fail(fmt.Errorf("unknown value tag %d", tag))
	}
	return nil
}
