package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

// Without a state directory the engine replays the newest outcomes, refuses
// a retry of an older key it still remembers, and forgets keys only beyond
// its bound (as at a restart) or after KeyRetention.
func TestMemoryStoreBounds(t *testing.T) {
	r := newRig(t)
	store := engine.NewMemoryStoreSized(r.clock.Now, 2, 3, 1, quiet)
	e, err := engine.New(r.e.Manifest(), r.e.Policy(), r.buses, engine.Options{Now: r.clock.Now, Idempotency: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	mb := r.buses["mb"].(simBus)
	do := func(i int) promcp.DoResponse {
		t.Helper()
		resp, err := e.Do(context.Background(), operator, "do_damper_position", promcp.DoRequest{Value: float64(30 + i), IdempotencyKey: fmt.Sprintf("k%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	first := map[int]promcp.DoResponse{}
	for i := range 6 {
		if first[i] = do(i); first[i].Status != promcp.StatusSuccess {
			t.Fatalf("k%d: %+v", i, first[i])
		}
	}
	writes := mb.Writes()
	for _, i := range []int{5, 4} { // the newest two: replayed
		if resp := do(i); resp.Timestamp != first[i].Timestamp || resp.Status != promcp.StatusSuccess {
			t.Fatalf("retry of k%d = %+v, want the stored %+v", i, resp, first[i])
		}
	}
	for _, i := range []int{3, 2, 1} { // remembered as used: refused
		if resp := do(i); resp.Status != promcp.StatusFailed || !strings.Contains(resp.Reason, "no longer holds its outcome") {
			t.Fatalf("retry of k%d = %+v, want a refusal", i, resp)
		}
	}
	if w := mb.Writes(); w != writes {
		t.Fatalf("retries wrote %d times", w-writes)
	}
	// k0 is beyond the bound: forgotten as at a restart, so it is a new call.
	if resp := do(0); resp.Status != promcp.StatusSuccess || mb.Writes() != writes+1 {
		t.Fatalf("k0 after it was forgotten = %+v (writes %d)", resp, mb.Writes()-writes)
	}
	// After KeyRetention every key is new again (blocks of one key expire with it).
	r.clock.Advance(engine.KeyRetention + time.Minute)
	if resp := do(2); resp.Status != promcp.StatusSuccess || mb.Writes() != writes+2 {
		t.Fatalf("k2 a day later = %+v (writes %d)", resp, mb.Writes()-writes)
	}
}

// Used keys are kept in sorted blocks; the oldest block goes past the bound.
func TestMemoryStoreBlocks(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	store := engine.NewMemoryStoreSized(func() time.Time { return now }, 1, 4, 2, quiet)
	save := func(i int) {
		t.Helper()
		if err := store.Save(fmt.Sprintf("k%d", i), engine.Record{Fingerprint: "f", At: now}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(want map[int]string) {
		t.Helper()
		for i, w := range want {
			r, ok := store.Load(fmt.Sprintf("k%d", i))
			got := "unknown"
			switch {
			case ok && r.Forgotten:
				got = "forgotten"
			case ok:
				got = "kept"
			}
			if got != w {
				t.Errorf("k%d is %s, want %s", i, got, w)
			}
		}
	}
	for i := range 6 {
		save(i)
	}
	check(map[int]string{0: "forgotten", 1: "forgotten", 2: "forgotten", 3: "forgotten", 4: "forgotten", 5: "kept", 6: "unknown"})
	save(6) // a third block of two: the first goes
	check(map[int]string{0: "unknown", 1: "unknown", 2: "forgotten", 3: "forgotten", 4: "forgotten", 5: "forgotten", 6: "kept"})
}
