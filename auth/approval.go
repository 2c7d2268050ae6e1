package auth

import (
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Why an approval state is refused.
var (
	ErrApprovalForged   = errors.New("the approval state was not issued by this server or was altered")
	ErrApprovalExpired  = errors.New("the approval has expired")
	ErrApprovalMismatch = errors.New("the approval was given for a different call")
	ErrApprovalUsed     = errors.New("the approval was already used")
)

// ApprovalClaim is what an approval state binds: one call of one tool with
// these arguments, by this caller, writing this value over that previous
// value, before Expires.
type ApprovalClaim struct {
	Tool   string `json:"tool"`
	Args   string `json:"args"`   // ArgsDigest of the call's arguments
	Key    string `json:"key"`    // the idempotency key the call acts under
	Caller string `json:"caller"` // the caller's identity
	// Value is what the person was shown would be written (JSON).
	Value json.RawMessage `json:"value"`
	// Previous is the device value the person was shown as the one Value
	// replaces (JSON; null when it could not be read). The person approved
	// changing that value, so the write needs the device to still hold it.
	Previous json.RawMessage `json:"previous"`
	Expires  int64           `json:"exp"` // Unix milliseconds
	Nonce    string          `json:"nonce"`
}

// ArgsDigest is a call's arguments reduced to a digest: SHA-256 of their JSON
// (encoding/json sorts object keys, so equal arguments give equal digests).
func ArgsDigest(args map[string]any) (string, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Approvals issues and redeems approval states: the opaque state a client
// echoes back with a person's answer. Each state is HMAC-signed with a key
// that lives only in this process, expires after the approval timeout and is
// redeemed at most once.
type Approvals struct {
	key []byte
	now func() time.Time

	mu   sync.Mutex
	used map[string]time.Time // redeemed nonces, kept until they expire
	// pending are the claims issued and not redeemed yet, by nonce, until
	// they expire: the approvals a person may still be asked for.
	pending map[string]ApprovalClaim
}

// NewApprovals returns an issuer with a fresh random key (a restart
// invalidates every outstanding approval). now defaults to time.Now.
func NewApprovals(now func() time.Time) *Approvals {
	if now == nil {
		now = time.Now
	}
	key := make([]byte, 32)
	rand.Read(key)
	return &Approvals{key: key, now: now, used: map[string]time.Time{}, pending: map[string]ApprovalClaim{}}
}

var b64 = base64.RawURLEncoding

// Issue signs c (its Expires and Nonce are set here) valid for ttl.
func (a *Approvals) Issue(c ApprovalClaim, ttl time.Duration) (string, ApprovalClaim, error) {
	nonce := make([]byte, 16)
	rand.Read(nonce)
	c.Nonce = hex.EncodeToString(nonce)
	c.Expires = a.now().Add(ttl).UnixMilli()
	payload, err := json.Marshal(c)
	if err != nil {
		return "", c, err
	}
	a.mu.Lock()
	a.pending[c.Nonce] = c
	a.mu.Unlock()
	return b64.EncodeToString(payload) + "." + b64.EncodeToString(a.sign(payload)), c, nil
}

// Pending lists the claims issued and neither redeemed nor expired, the
// soonest to expire first: the calls waiting for a person's answer.
func (a *Approvals) Pending() []ApprovalClaim {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forget(a.now())
	out := make([]ApprovalClaim, 0, len(a.pending))
	for _, c := range a.pending {
		out = append(out, c)
	}
	slices.SortFunc(out, func(x, y ApprovalClaim) int { return cmp.Compare(x.Expires, y.Expires) })
	return out
}

// forget drops used nonces and pending claims that have expired.
func (a *Approvals) forget(now time.Time) {
	for n, until := range a.used {
		if now.After(until) {
			delete(a.used, n)
		}
	}
	for n, c := range a.pending {
		if !now.Before(time.UnixMilli(c.Expires)) {
			delete(a.pending, n)
		}
	}
}

func (a *Approvals) sign(payload []byte) []byte {
	m := hmac.New(sha256.New, a.key)
	m.Write(payload)
	return m.Sum(nil)
}

// Redeem verifies state and binds it to the call in want (Tool, Args and
// Caller must match), then marks it used. It returns the signed claim.
func (a *Approvals) Redeem(state string, want ApprovalClaim) (ApprovalClaim, error) {
	var c ApprovalClaim
	p64, s64, ok := strings.Cut(state, ".")
	payload, perr := b64.DecodeString(p64)
	sig, serr := b64.DecodeString(s64)
	if !ok || perr != nil || serr != nil || !hmac.Equal(sig, a.sign(payload)) {
		return c, ErrApprovalForged
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return c, ErrApprovalForged
	}
	now := a.now()
	exp := time.UnixMilli(c.Expires)
	if !now.Before(exp) {
		return c, fmt.Errorf("%w (at %s)", ErrApprovalExpired, exp.UTC().Format(time.RFC3339))
	}
	if c.Tool != want.Tool || c.Args != want.Args || c.Caller != want.Caller {
		return c, ErrApprovalMismatch
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forget(now)
	if _, dup := a.used[c.Nonce]; dup {
		return c, ErrApprovalUsed
	}
	a.used[c.Nonce] = exp
	delete(a.pending, c.Nonce)
	return c, nil
}
