package engine

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/internal/allocs"
	"github.com/physmcp/physmcpd/promcp"
)

// timestampMs and sha256Hex read what they read by hand; they must agree
// with the library's parse and format round trip they replace.
func TestRecordCodecFastPathsAgreeWithTheLibrary(t *testing.T) {
	viaParse := func(s string) (int64, bool) {
		tm, err := time.Parse("2006-01-02T15:04:05.000Z07:00", s)
		if err != nil || promcp.Time(tm) != s {
			return 0, false
		}
		return tm.UnixMilli(), true
	}
	stamps := []string{"", "2026-12-06T10:50:00.123Z", "0000-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z",
		"2024-02-29T12:00:00.000Z", "2026-02-29T12:00:00.000Z", "2026-04-31T00:00:00.000Z", "2026-13-01T00:00:00.000Z",
		"2026-00-01T00:00:00.000Z", "2026-01-00T00:00:00.000Z", "2026-01-01T24:00:00.000Z", "2026-01-01T00:60:00.000Z",
		"2026-01-01T00:00:60.000Z", "2026-01-01T00:00:00.000z", "2026-01-01 00:00:00.000Z", "2026-01-01T00:00:00.000+00:00",
		"2026-01-01T01:00:00.000+01:00", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00.0000Z", "2026-1-01T00:00:00.000Z0",
		"+026-01-01T00:00:00.000Z", "2026-01-01T00:00:00.-00Z", "2026-01-01T00:00:00.00aZ"}
	first, last := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC).UnixMilli()
	for ms := first; ms <= last; ms += (last-first)/5000 + 7 {
		stamps = append(stamps, promcp.Time(time.UnixMilli(ms)))
	}
	for _, s := range stamps {
		gotMs, gotOK := timestampMs(s)
		wantMs, wantOK := viaParse(s)
		if gotMs != wantMs || gotOK != wantOK {
			t.Errorf("timestampMs(%q) = %d %v, want %d %v", s, gotMs, gotOK, wantMs, wantOK)
		}
	}
	sum := "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	for _, s := range []string{sum, strings.ToUpper(sum), sum[:63], sum + "0", sum[:63] + "g", "", strings.Repeat("0", 64), strings.Repeat("f", 64)} {
		fp, ok := sha256Hex(s)
		want, err := hex.DecodeString(s)
		wantOK := err == nil && len(want) == 32 && hex.EncodeToString(want) == s
		if ok != wantOK || ok && string(fp[:]) != string(want) {
			t.Errorf("sha256Hex(%q) = %x %v, want %x %v", s, fp, ok, want, wantOK)
		}
	}
}

// Encoding a do_*'s outcome, which every durable call does twice, checks
// its timestamp, fingerprint and derived compensation without parsing,
// decoding or formatting into new memory: 4 allocations (the record, and
// the hint check's boxed values) where there were 12.
func TestEncodeRecordAllocatesLittle(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 50, 0, 123e6, time.UTC)
	hint := "do_zone1_setpoint value=21.5"
	r := Record{
		Fingerprint: fingerprint("do_zone1_setpoint", 22.0), Tool: "do_zone1_setpoint", Caller: "operator", Role: "operator",
		Seq: 7, SentAt: at, At: at,
		Response: promcp.DoResponse{
			Status: promcp.StatusSuccess, IdempotencyKey: "k1", AppliedValue: 22.0, PreviousValue: 21.5,
			Compensable: true, CompensationHint: &hint, Timestamp: promcp.Time(at),
			Compensation: &promcp.Compensation{Tool: "do_zone1_setpoint", Arguments: map[string]any{"value": 21.5}},
			Permission:   promcp.Allowed, DeviceID: "zones",
		},
	}
	if n := allocs.Fewest(100, func() {
		if _, err := EncodeRecord("k1", r); err != nil {
			t.Fatal(err)
		}
	}); n > 4 {
		t.Errorf("EncodeRecord allocated %.0f times, want at most 4", n)
	}
	v, err := EncodeRecord("k1", r)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeRecord("k1", v); err != nil || got.Fingerprint != r.Fingerprint || *got.Response.CompensationHint != hint || got.Response.Timestamp != r.Response.Timestamp {
		t.Fatalf("decoded %+v %v", got, err)
	}
}
