package state

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// Records are kept in a compact binary form (format 2): about 140 bytes for
// a typical outcome where its JSON took about 500, and cheaper to write and
// read back on every do_*. What the engine can derive again (the response's
// key, compensation and its hint, the timestamp's text) is stored as a flag
// when it is exactly what would be derived, and in full otherwise, so a
// record decodes to what was saved. Values decode as a JSON round trip would
// leave them (numbers as float64), as they did when records were JSON. A
// record written by an older physmcpd is JSON and starts with '{': it is
// still read (decodeRecord), so nothing needs rewriting.

// recordFormat is the first byte of a binary record.
const recordFormat = 2

// Flags of a binary record.
const (
	fInDoubt = 1 << iota
	fForgotten
	fCompensable
	fFingerprintSHA256 // 32 raw bytes instead of 64 hex digits
	fKeyIsRecordKey    // the response's idempotency_key is the record's key
	fHintDerived       // compensation_hint is "<tool> value=<previous>"
	fHintText
	fCompensationDerived // {tool, arguments: {value: previous}}
	fCompensationJSON
	fTimestampMs // the response timestamp as milliseconds (promcp.Time)
	fTimestampText
	fSentAt
	fSideEffects // side_effects is not nil
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

// encodeRecord encodes r, stored under key.
func encodeRecord(key string, r engine.Record) ([]byte, error) {
	resp := r.Response
	var flags uint64
	set := func(f uint64, on bool) {
		if on {
			flags |= f
		}
	}
	set(fInDoubt, r.InDoubt)
	set(fForgotten, r.Forgotten)
	set(fCompensable, resp.Compensable)
	fp, fpErr := hex.DecodeString(r.Fingerprint)
	set(fFingerprintSHA256, fpErr == nil && len(fp) == 32 && hex.EncodeToString(fp) == r.Fingerprint)
	set(fKeyIsRecordKey, resp.IdempotencyKey == key)
	prev, err := appendValue(nil, resp.PreviousValue)
	if err != nil {
		return nil, fmt.Errorf("previous_value: %w", err)
	}
	switch {
	case resp.CompensationHint == nil:
	case *resp.CompensationHint == derivedHint(r.Tool, prev):
		flags |= fHintDerived
	default:
		flags |= fHintText
	}
	var comp []byte
	switch {
	case resp.Compensation == nil:
	case derivedCompensation(*resp.Compensation, r.Tool, prev):
		flags |= fCompensationDerived
	default:
		flags |= fCompensationJSON
		if comp, err = json.Marshal(resp.Compensation); err != nil {
			return nil, fmt.Errorf("compensation: %w", err)
		}
	}
	ms, msOK := timestampMs(resp.Timestamp)
	set(fTimestampMs, msOK)
	set(fTimestampText, !msOK && resp.Timestamp != "")
	set(fSentAt, !r.SentAt.IsZero())
	set(fSideEffects, resp.SideEffects != nil)

	b := make([]byte, 0, 160+len(resp.Reason))
	b = append(b, recordFormat)
	b = binary.AppendUvarint(b, flags)
	b = appendTime(b, r.At)
	if flags&fFingerprintSHA256 != 0 {
		b = append(b, fp...)
	} else {
		b = appendString(b, r.Fingerprint)
	}
	b = appendString(b, r.Tool)
	b = appendString(b, r.Caller)
	b = appendString(b, string(r.Role))
	b = binary.AppendUvarint(b, r.Seq)
	if flags&fSentAt != 0 {
		b = appendTime(b, r.SentAt)
	}
	b = appendString(b, string(resp.Status))
	if flags&fKeyIsRecordKey == 0 {
		b = appendString(b, resp.IdempotencyKey)
	}
	if b, err = appendValue(b, resp.AppliedValue); err != nil {
		return nil, fmt.Errorf("applied_value: %w", err)
	}
	b = append(b, prev...)
	if flags&fSideEffects != 0 {
		b = appendStrings(b, resp.SideEffects)
	}
	if flags&fHintText != 0 {
		b = appendString(b, *resp.CompensationHint)
	}
	switch {
	case flags&fTimestampMs != 0:
		b = binary.AppendVarint(b, ms)
	case flags&fTimestampText != 0:
		b = appendString(b, resp.Timestamp)
	}
	if flags&fCompensationJSON != 0 {
		b = appendBytes(b, comp)
	}
	b = appendString(b, string(resp.Permission))
	b = appendString(b, resp.Reason)
	b = appendStrings(b, resp.Warnings)
	b = appendString(b, resp.DeviceID)
	return b, nil
}

// decodeRecord decodes a record stored under key, in either format.
func decodeRecord(key string, v []byte) (engine.Record, error) {
	var r engine.Record
	if len(v) > 0 && v[0] == '{' {
		err := json.Unmarshal(v, &r)
		return r, err
	}
	d := decoder{b: v}
	if f := d.byte(); d.err != nil || f != recordFormat {
		return r, fmt.Errorf("not a record of a format this physmcpd knows (%.1x)", v)
	}
	flags := d.uvarint()
	r.At = d.time()
	if flags&fFingerprintSHA256 != 0 {
		r.Fingerprint = hex.EncodeToString(d.take(32))
	} else {
		r.Fingerprint = d.string()
	}
	r.Tool = d.string()
	r.Caller = d.string()
	r.Role = manifest.Role(d.string())
	r.Seq = d.uvarint()
	if flags&fSentAt != 0 {
		r.SentAt = d.time()
	}
	r.InDoubt = flags&fInDoubt != 0
	r.Forgotten = flags&fForgotten != 0
	resp := &r.Response
	resp.Status = promcp.Status(d.string())
	resp.IdempotencyKey = key
	if flags&fKeyIsRecordKey == 0 {
		resp.IdempotencyKey = d.string()
	}
	resp.AppliedValue = d.value()
	prevStart := d.off
	resp.PreviousValue = d.value()
	prev := v[prevStart:min(d.off, len(v))]
	if flags&fSideEffects != 0 {
		resp.SideEffects = d.strings()
		if resp.SideEffects == nil {
			resp.SideEffects = []string{}
		}
	}
	resp.Compensable = flags&fCompensable != 0
	switch {
	case flags&fHintDerived != 0:
		h := derivedHint(r.Tool, prev)
		resp.CompensationHint = &h
	case flags&fHintText != 0:
		h := d.string()
		resp.CompensationHint = &h
	}
	switch {
	case flags&fTimestampMs != 0:
		resp.Timestamp = promcp.Time(time.UnixMilli(d.varint()))
	case flags&fTimestampText != 0:
		resp.Timestamp = d.string()
	}
	switch {
	case flags&fCompensationDerived != 0:
		resp.Compensation = &promcp.Compensation{Tool: r.Tool, Arguments: map[string]any{"value": resp.PreviousValue}}
	case flags&fCompensationJSON != 0:
		resp.Compensation = new(promcp.Compensation)
		if err := json.Unmarshal(d.bytes(), resp.Compensation); err != nil && d.err == nil {
			d.err = fmt.Errorf("compensation: %w", err)
		}
	}
	resp.Permission = promcp.Permission(d.string())
	resp.Reason = d.string()
	resp.Warnings = d.strings()
	resp.DeviceID = d.string()
	if d.err == nil && d.off != len(v) {
		d.err = fmt.Errorf("%d bytes after the record", len(v)-d.off)
	}
	return r, d.err
}

// derivedHint is the compensation hint the engine gives for previous (an
// encoded value): the tool with the previous value, as %v prints it.
func derivedHint(tool string, prev []byte) string {
	d := decoder{b: prev}
	return fmt.Sprintf("%s value=%v", tool, d.value())
}

// derivedCompensation says c is what the engine derives for tool and the
// previous value (encoded): writing that value back.
func derivedCompensation(c promcp.Compensation, tool string, prev []byte) bool {
	v, ok := c.Arguments["value"]
	if c.Tool != tool || len(c.Arguments) != 1 || !ok {
		return false
	}
	enc, err := appendValue(nil, v)
	return err == nil && string(enc) == string(prev)
}

// timestampMs is s as milliseconds when it is promcp.Time's text for them.
func timestampMs(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	t, err := time.Parse("2006-01-02T15:04:05.000Z07:00", s)
	if err != nil || promcp.Time(t) != s {
		return 0, false
	}
	return t.UnixMilli(), true
}

// appendValue encodes a JSON-like value; numbers become float64 as a JSON
// round trip would make them.
func appendValue(b []byte, v any) ([]byte, error) {
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
		return appendString(append(b, vString), x), nil
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return appendBytes(append(b, vJSON), j), nil
}

func appendNumber(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(append(b, vNumber), math.Float64bits(f))
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendBytes(b, s []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

// appendTime keeps t to the nanosecond, the zero time included (as a JSON
// round trip did); it decodes in UTC.
func appendTime(b []byte, t time.Time) []byte {
	return binary.AppendUvarint(binary.AppendVarint(b, t.Unix()), uint64(t.Nanosecond()))
}

// decoder reads what the append functions wrote; the first error sticks and
// every later read returns zero values.
type decoder struct {
	b   []byte
	off int
	err error
}

var errTruncated = errors.New("truncated")

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.off = len(d.b)
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || n < 0 || len(d.b)-d.off < n {
		d.fail(errTruncated)
		return nil
	}
	s := d.b[d.off : d.off+n]
	d.off += n
	return s
}

func (d *decoder) byte() byte {
	if s := d.take(1); s != nil {
		return s[0]
	}
	return 0
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail(errTruncated)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail(errTruncated)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail(errTruncated)
		return nil
	}
	return d.take(int(n))
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) strings() []string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail(errTruncated)
		return nil
	}
	var ss []string
	for range n {
		ss = append(ss, d.string())
	}
	return ss
}

func (d *decoder) time() time.Time {
	sec := d.varint()
	nsec := d.uvarint()
	if nsec >= 1e9 {
		d.fail(errors.New("bad time"))
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

func (d *decoder) value() any {
	switch tag := d.byte(); tag {
	case vNil:
		return nil
	case vFalse:
		return false
	case vTrue:
		return true
	case vNumber:
		if s := d.take(8); s != nil {
			return math.Float64frombits(binary.LittleEndian.Uint64(s))
		}
	case vString:
		return d.string()
	case vJSON:
		var v any
		if j := d.bytes(); d.err == nil {
			if err := json.Unmarshal(j, &v); err != nil {
				d.fail(err)
			}
		}
		return v
	default:
		d.fail(fmt.Errorf("unknown value tag %d", tag))
	}
	return nil
}
