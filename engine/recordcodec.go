package engine

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/physmcp/physmcpd/internal/binenc"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// Records are kept in a compact binary form, by the state store (its format
// 2) and in memory without one (MemoryStore): about 140 bytes for a typical
// outcome where its JSON took about 500, and cheaper to write and read back
// on every do_*. What the engine can derive again (the response's key,
// compensation and its hint, the timestamp's text) is stored as a flag when
// it is exactly what would be derived, and in full otherwise, so a record
// decodes to what was saved. Values decode as a JSON round trip would
// leave them (numbers as float64), as they did when records were JSON. A
// record written by an older physmcpd is JSON and starts with '{': it is
// still read (DecodeRecord), so nothing needs rewriting.

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
	fLateUntil
)

// EncodeRecord encodes r, stored under key (which it does not hold).
func EncodeRecord(key string, r Record) ([]byte, error) {
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
	fp, fpOK := sha256Hex(r.Fingerprint)
	set(fFingerprintSHA256, fpOK)
	set(fKeyIsRecordKey, resp.IdempotencyKey == key)
	var prevRoom [16]byte // a number's encoding fits: no allocation
	prev, err := binenc.AppendValue(prevRoom[:0], resp.PreviousValue)
	if err != nil {
		return nil, fmt.Errorf("previous_value: %w", err)
	}
	switch {
	case resp.CompensationHint == nil:
	case isDerivedHint(*resp.CompensationHint, r.Tool, prev):
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
	set(fLateUntil, !r.LateUntil.IsZero())

	b := make([]byte, 0, 160+len(resp.Reason))
	b = append(b, recordFormat)
	b = binary.AppendUvarint(b, flags)
	b = binenc.AppendTime(b, r.At)
	if flags&fFingerprintSHA256 != 0 {
		b = append(b, fp[:]...)
	} else {
		b = binenc.AppendString(b, r.Fingerprint)
	}
	b = binenc.AppendString(b, r.Tool)
	b = binenc.AppendString(b, r.Caller)
	b = binenc.AppendString(b, string(r.Role))
	b = binary.AppendUvarint(b, r.Seq)
	if flags&fSentAt != 0 {
		b = binenc.AppendTime(b, r.SentAt)
	}
	if flags&fLateUntil != 0 {
		b = binenc.AppendTime(b, r.LateUntil)
	}
	b = binenc.AppendString(b, string(resp.Status))
	if flags&fKeyIsRecordKey == 0 {
		b = binenc.AppendString(b, resp.IdempotencyKey)
	}
	if b, err = binenc.AppendValue(b, resp.AppliedValue); err != nil {
		return nil, fmt.Errorf("applied_value: %w", err)
	}
	b = append(b, prev...)
	if flags&fSideEffects != 0 {
		b = binenc.AppendStrings(b, resp.SideEffects)
	}
	if flags&fHintText != 0 {
		b = binenc.AppendString(b, *resp.CompensationHint)
	}
	switch {
	case flags&fTimestampMs != 0:
		b = binary.AppendVarint(b, ms)
	case flags&fTimestampText != 0:
		b = binenc.AppendString(b, resp.Timestamp)
	}
	if flags&fCompensationJSON != 0 {
		b = binenc.AppendBytes(b, comp)
	}
	b = binenc.AppendString(b, string(resp.Permission))
	b = binenc.AppendString(b, resp.Reason)
	b = binenc.AppendStrings(b, resp.Warnings)
	b = binenc.AppendString(b, resp.DeviceID)
	return b, nil
}

// DecodeRecord decodes a record stored under key, binary or JSON.
func DecodeRecord(key string, v []byte) (Record, error) {
	var r Record
	if len(v) > 0 && v[0] == '{' {
		err := json.Unmarshal(v, &r)
		return r, err
	}
	d := binenc.Decoder{B: v}
	if f := d.Byte(); d.Err() != nil || f != recordFormat {
		return r, fmt.Errorf("not a record of a format this physmcpd knows (%.1x)", v)
	}
	flags := d.Uvarint()
	r.At = d.Time()
	if flags&fFingerprintSHA256 != 0 {
		r.Fingerprint = hex.EncodeToString(d.Take(32))
	} else {
		r.Fingerprint = d.String()
	}
	r.Tool = d.String()
	r.Caller = d.String()
	r.Role = manifest.Role(d.String())
	r.Seq = d.Uvarint()
	if flags&fSentAt != 0 {
		r.SentAt = d.Time()
	}
	if flags&fLateUntil != 0 {
		r.LateUntil = d.Time()
	}
	r.InDoubt = flags&fInDoubt != 0
	r.Forgotten = flags&fForgotten != 0
	resp := &r.Response
	resp.Status = promcp.Status(d.String())
	resp.IdempotencyKey = key
	if flags&fKeyIsRecordKey == 0 {
		resp.IdempotencyKey = d.String()
	}
	resp.AppliedValue = d.Value()
	prevStart := d.Off
	resp.PreviousValue = d.Value()
	prev := v[prevStart:d.Off]
	if flags&fSideEffects != 0 {
		resp.SideEffects = d.Strings()
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
		h := d.String()
		resp.CompensationHint = &h
	}
	switch {
	case flags&fTimestampMs != 0:
		resp.Timestamp = promcp.Time(time.UnixMilli(d.Varint()))
	case flags&fTimestampText != 0:
		resp.Timestamp = d.String()
	}
	switch {
	case flags&fCompensationDerived != 0:
		resp.Compensation = &promcp.Compensation{Tool: r.Tool, Arguments: map[string]any{"value": resp.PreviousValue}}
	case flags&fCompensationJSON != 0:
		resp.Compensation = new(promcp.Compensation)
		if j := d.Bytes(); d.Err() == nil {
			if err := json.Unmarshal(j, resp.Compensation); err != nil {
				d.Fail(fmt.Errorf("compensation: %w", err))
			}
		}
	}
	resp.Permission = promcp.Permission(d.String())
	resp.Reason = d.String()
	resp.Warnings = d.Strings()
	resp.DeviceID = d.String()
	return r, d.Done()
}

// derivedHint is the compensation hint the engine gives for previous (an
// encoded value): the tool with the previous value, as %v prints it.
func derivedHint(tool string, prev []byte) string {
	return string(appendDerivedHint(nil, tool, prev))
}

func appendDerivedHint(b []byte, tool string, prev []byte) []byte {
	d := binenc.Decoder{B: prev}
	return fmt.Appendf(b, "%s value=%v", tool, d.Value())
}

// isDerivedHint says h is derivedHint(tool, prev), made in room on the
// stack: EncodeRecord asks it of every outcome.
func isDerivedHint(h, tool string, prev []byte) bool {
	var room [128]byte
	return string(appendDerivedHint(room[:0], tool, prev)) == h
}

// sha256Hex decodes s when it is 64 lowercase hex digits (a SHA-256 as
// hex.EncodeToString gives it), without allocating.
func sha256Hex(s string) (fp [32]byte, ok bool) {
	if len(s) != 2*len(fp) {
		return fp, false
	}
	for i := range fp {
		hi, lo := lowerHex(s[2*i]), lowerHex(s[2*i+1])
		if hi < 0 || lo < 0 {
			return fp, false
		}
		fp[i] = byte(hi<<4 | lo)
	}
	return fp, true
}

func lowerHex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

// derivedCompensation says c is what the engine derives for tool and the
// previous value (encoded): writing that value back.
func derivedCompensation(c promcp.Compensation, tool string, prev []byte) bool {
	v, ok := c.Arguments["value"]
	if c.Tool != tool || len(c.Arguments) != 1 || !ok {
		return false
	}
	var room [16]byte
	enc, err := binenc.AppendValue(room[:0], v)
	return err == nil && string(enc) == string(prev)
}

// timestampMs is s as milliseconds when it is promcp.Time's text for them
// (UTC, "2006-01-02T15:04:05.000Z"). It reads the digits itself: time.Parse,
// and formatting its result again to compare, were half of EncodeRecord's
// time, which every do_* pays twice.
func timestampMs(s string) (int64, bool) {
	const layout = "0000-00-00T00:00:00.000Z"
	if len(s) != len(layout) {
		return 0, false
	}
	var n [7]int // year, month, day, hour, minute, second, millisecond
	f := 0
	for i := range len(layout) {
		switch c := s[i]; {
		case layout[i] != '0':
			if c != layout[i] {
				return 0, false
			}
			f++
		case '0' <= c && c <= '9':
			n[f] = n[f]*10 + int(c-'0')
		default:
			return 0, false
		}
	}
	if n[1] < 1 || n[1] > 12 || n[2] < 1 || n[3] > 23 || n[4] > 59 || n[5] > 59 {
		return 0, false
	}
	t := time.Date(n[0], time.Month(n[1]), n[2], n[3], n[4], n[5], n[6]*1e6, time.UTC)
	if t.Day() != n[2] {
		return 0, false // a day the month does not have, which time.Date moves on
	}
	return t.UnixMilli(), true
}
