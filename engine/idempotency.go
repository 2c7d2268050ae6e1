package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// KeyRetention is how long do_* outcomes are kept by idempotency key (proMCP: at least 24 h).
const KeyRetention = 24 * time.Hour

// Record is what the engine remembers of one do_* call by its key.
type Record struct {
	// Fingerprint identifies the request (tool and canonical arguments), so a
	// key reused for another request is refused rather than replayed.
	Fingerprint string
	// Tool is the do_* tool the key was used for (to settle in-doubt keys at start-up).
	Tool string
	// Caller and Role are who asked, so an outcome recovered from the store
	// into the audit trail still says who.
	Caller   string        `json:",omitempty"`
	Role     manifest.Role `json:",omitempty"`
	Response promcp.DoResponse
	At       time.Time
	// InDoubt marks a write that was sent, or was about to be, whose outcome
	// is unknown (reply lost, link dropped, crash). A retry settles it from
	// Seq and the device instead of writing blindly.
	InDoubt bool
	// Seq is the number the write was given among the writes to its register
	// or line (WriteHistory.Seq); 0 when no write was attempted. A retry whose
	// location has a later number was superseded.
	Seq uint64 `json:",omitempty"`
	// SentAt is when the write left (or was about to leave) for the device:
	// the moment its cooldown and rate windows are charged from.
	SentAt time.Time `json:",omitzero"`
	// LateUntil is when the settle window of an in-doubt write ends: until
	// then the device (a gateway's queue) may still apply the frame, so a
	// read-back proves nothing yet (the bus's late_write_ms after physmcpd
	// gave up on the frame). Zero on buses without a window.
	LateUntil time.Time `json:",omitzero"`
	// Forgotten says the store knows the key was used (at At) but no longer
	// holds its outcome (MemoryStore keeps a bounded number): a call with it
	// is refused, neither replayed nor executed again.
	Forgotten bool `json:",omitempty"`
}

// final is r's request with its outcome resp, recorded at `at`: no longer in doubt.
func (r Record) final(resp promcp.DoResponse, at time.Time) Record {
	return Record{Fingerprint: r.Fingerprint, Tool: r.Tool, Caller: r.Caller, Role: r.Role, Response: resp, At: at}
}

// retryable says a stored outcome is a failure that wrote nothing for
// certain (the device refused it, or it never left): a retry with the key
// tries again instead of replaying the failure.
func (r Record) retryable() bool {
	return !r.InDoubt && r.Response.Status == promcp.StatusFailed
}

// IdempotencyStore keeps Records by key. The Full profile persists them.
type IdempotencyStore interface {
	Load(key string) (Record, bool)
	Save(key string, r Record) error
}

// fingerprint canonicalises a request: JSON numbers compare by value, so 21
// and 21.0 are the same request.
func fingerprint(tool string, value any) string {
	b, _ := json.Marshal(struct {
		Tool  string `json:"tool"`
		Value any    `json:"value"`
	}{tool, value})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// keyedCall lets concurrent calls with one key wait for the first instead of
// acting twice.
type keyedCall struct {
	done  chan struct{}
	began time.Time // when the call claimed the key (the engine's clock)
	fp    string    // the request it works on (fingerprint)
}

// keyBusy says a call gave up waiting for another call with its key: its
// context ended (err) while that call, begun at began for the request fp,
// was still running.
type keyBusy struct {
	began time.Time
	fp    string
	err   error
}

func (b *keyBusy) Error() string {
	return fmt.Sprintf("a call with this key has been running since %s (%v)", promcp.Time(b.began), b.err)
}

// keyBusyAnswer is the answer of a call for the request fp that gave up
// waiting for another call with its key (busy, claim's error); the call
// acted on nothing. When the other call works on another request, the call
// is refused as a key reused for a different request (no permission; outcome
// ""): a retry would be refused so once that call is recorded, so its
// outcome must not be promised. Otherwise that call's outcome is not known
// yet: the answer is source_unreachable (waiting helps), its outcome
// OutcomeKeyBusy, and it says when to retry (after retry; zero: once that
// call has answered). sent says what the other call has done so far ("":
// nothing known).
func keyBusyAnswer(busy error, key, fp, sent string, retry time.Time) (perm promcp.Permission, reason, outcome string) {
	if b := (*keyBusy)(nil); errors.As(busy, &b) && b.fp != fp {
		return "", fmt.Sprintf("idempotency_key %q is in use by a call for a different request (%v); nothing was written: use a new key for a new action", key, busy), ""
	}
	when := "once that call has answered"
	if !retry.IsZero() {
		when = "after " + promcp.Time(retry)
	}
	return promcp.SourceUnreachable, fmt.Sprintf("%v, and this call could not wait for its outcome%s. Nothing was written by this call. "+
		"Retry with the same idempotency_key %s: the retry returns that call's outcome and never acts twice", busy, sent, when), OutcomeKeyBusy
}

// claim makes the caller, working on the request fp, the only one working
// on key; it returns a release function, or waits for the call already
// working on it, at most until ctx ends: a caller's deadline bounds its wait
// for another call as it bounds its own transactions. A caller with no
// deadline waits at most wait (0: until ctx ends): over MCP, do_* and
// operations run detached from the request, and a call wedged in its driver
// holds its key for as long as it is wedged.
func (e *Engine) claim(ctx context.Context, key, fp string, wait time.Duration) (release func(), err error) {
	var expired <-chan time.Time
	for {
		e.inflight.Lock()
		c, busy := e.running[key]
		if !busy {
			c = &keyedCall{done: make(chan struct{}), began: e.now(), fp: fp}
			e.running[key] = c
			e.inflight.Unlock()
			return func() {
				e.inflight.Lock()
				delete(e.running, key)
				e.inflight.Unlock()
				close(c.done)
			}, nil
		}
		e.inflight.Unlock()
		if _, ok := ctx.Deadline(); !ok && wait > 0 && expired == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, &keyBusy{began: c.began, fp: c.fp, err: ctx.Err()}
		case <-expired:
			return nil, &keyBusy{began: c.began, fp: c.fp, err: fmt.Errorf("this call has no deadline and waited %v for it", wait)}
		}
	}
}
