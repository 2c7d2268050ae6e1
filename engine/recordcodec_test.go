package engine_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

var at0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// outcome is a realistic do_* outcome (about 400 bytes of JSON).
func outcome(i int) engine.Record {
	hint := fmt.Sprintf("do_fan_speed value=%d", i%100)
	return engine.Record{Fingerprint: fmt.Sprintf("fp-%06d-%s", i, strings.Repeat("f", 48)), Tool: "do_fan_speed", At: at0, Seq: uint64(i), SentAt: at0,
		Response: promcp.DoResponse{Status: promcp.StatusSuccess, IdempotencyKey: fmt.Sprintf("key-%06d", i), AppliedValue: float64(i % 100),
			PreviousValue: 40.0, SideEffects: []string{"airflow changes within 2 s"}, Compensable: true, CompensationHint: &hint,
			Timestamp: at0.Format(time.RFC3339Nano), DeviceID: "greenhouse_north_01"}}
}

// jsonRoundTrip is what a JSON record (the state store's format 1) gave back
// for r: the binary form must give back the same.
func jsonRoundTrip(t *testing.T, r engine.Record) engine.Record {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var out engine.Record
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRecordEncodingKeepsWhatJSONKept(t *testing.T) {
	typical := outcome(7)
	typical.Fingerprint = fmt.Sprintf("%064x", 12345)
	typical.Caller, typical.Role = "agent-1", "operator"
	hint := "do_fan_speed value=40"
	typical.Response.CompensationHint = &hint
	typical.Response.Compensation = &promcp.Compensation{Tool: "do_fan_speed", Arguments: map[string]any{"value": 40.0}}
	typical.Response.Timestamp = promcp.Time(at0.Add(1234 * time.Millisecond))

	intent := typical
	intent.InDoubt, intent.SentAt, intent.Response.Status = true, at0.Add(time.Nanosecond), promcp.StatusFailed
	intent.LateUntil = at0.Add(3*time.Second + time.Nanosecond)

	refused := engine.Record{Fingerprint: "not-hex", Tool: "do_valve", At: at0,
		Response: promcp.DoResponse{Status: promcp.StatusFailed, IdempotencyKey: "another key", SideEffects: []string{},
			Permission: promcp.PolicyDenied, Reason: "cooldown: 12 s left", Warnings: []string{"a", "b"}, Timestamp: "not a time"}}

	odd := engine.Record{Tool: "do_x", At: time.Time{}, Forgotten: true,
		Response: promcp.DoResponse{AppliedValue: map[string]any{"a": []any{1.0, "x"}}, PreviousValue: int64(1) << 40,
			CompensationHint: new(string), Compensation: &promcp.Compensation{Tool: "do_y", Arguments: map[string]any{"value": 1.0}}}}
	values := engine.Record{Tool: "do_x", At: at0, Response: promcp.DoResponse{AppliedValue: true, PreviousValue: "open", IdempotencyKey: "k"}}
	ints := engine.Record{Tool: "do_x", At: at0, Response: promcp.DoResponse{AppliedValue: 21, PreviousValue: uint16(7), IdempotencyKey: "k"}}

	for name, r := range map[string]engine.Record{"typical": typical, "intent": intent, "refused": refused, "odd": odd, "values": values, "ints": ints} {
		t.Run(name, func(t *testing.T) {
			v, err := engine.EncodeRecord("k", r)
			if err != nil {
				t.Fatal(err)
			}
			got, err := engine.DecodeRecord("k", v)
			if err != nil {
				t.Fatal(err)
			}
			want := jsonRoundTrip(t, r)
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			if string(g) != string(w) {
				t.Fatalf("decoded\n%s\nwant (as JSON kept it)\n%s", g, w)
			}
			if !got.At.Equal(r.At) || !got.SentAt.Equal(r.SentAt) {
				t.Fatalf("times %v %v, want %v %v", got.At, got.SentAt, r.At, r.SentAt)
			}
			// every shorter prefix is an error, never a panic or a record
			for n := range len(v) {
				if _, err := engine.DecodeRecord("k", v[:n]); err == nil {
					t.Fatalf("a record cut to %d of %d bytes decoded", n, len(v))
				}
			}
		})
	}
	v, _ := engine.EncodeRecord("key-000007", typical)
	j, _ := json.Marshal(typical)
	if len(v) > 200 || 2*len(v) > len(j) {
		t.Errorf("a typical record takes %d bytes (JSON: %d)", len(v), len(j))
	}
}

// A record of the state store's format 1 (JSON) still reads.
func TestJSONRecordsStillDecode(t *testing.T) {
	r := outcome(3)
	j, _ := json.Marshal(r)
	got, err := engine.DecodeRecord("key-000003", j)
	if err != nil || got.Response.IdempotencyKey != "key-000003" || got.Fingerprint != r.Fingerprint {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	if _, err := engine.DecodeRecord("k", []byte{9, 1, 2}); err == nil {
		t.Fatal("a record of an unknown format decoded")
	}
}
