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
	fp, fpErr := hex.DecodeString(r.Fingerprint)
	set(fFingerprintSHA256, fpErr == nil && len(fp) == 32 && hex.EncodeToString(fp) == r.Fingerprint)
	set(fKeyIsRecordKey, resp.IdempotencyKey == key)
	prev, err := binenc.AppendValue(nil, resp.PreviousValue)
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
	set(fLateUntil, !r.LateUntil.IsZero())

	b := make([]byte, 0, 160+len(resp.Reason))
	b = append(b, recordFormat)
	b = binary.AppendUvarint(b, flags)
	b = binenc.AppendTime(b, r.At)
	if flags&fFingerprintSHA256 != 0 {
		b = append(b, fp...)
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
	d := binenc.Decoder{B: prev}
	return fmt.Sprintf("%s value=%v", tool, d.Value())
}

// derivedCompensation says c is what the engine derives for tool and the
// previous value (encoded): writing that value back.
func derivedCompensation(c promcp.Compensation, tool string, prev []byte) bool {
	v, ok := c.Arguments["value"]
	if c.Tool != tool || len(c.Arguments) != 1 || !ok {
		return false
	}
	enc, err := binenc.AppendValue(nil, v)
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
