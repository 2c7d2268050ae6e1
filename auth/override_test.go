package auth

import (
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/policy"
)

// An override is accepted until the very end of its TTL and refused just
// after it: no clock-skew leeway extends an emergency grant. The policy's TTL
// bounds a token minted under a longer one in the same way.
func TestOverrideExpiresExactlyAtTTL(t *testing.T) {
	key := NewOverrideKey()
	minted := time.Unix(1_700_000_000, 0)
	const ttl = 60 * time.Second
	emergency := func(seconds int) *policy.Policy {
		return &policy.Policy{Emergency: &policy.Emergency{OverridePermission: "admin", OverrideTokenTTLSeconds: seconds}}
	}
	for name, mintedUnder := range map[string]*policy.Policy{
		"its own exp":                    emergency(60),
		"the policy's shorter TTL (iat)": emergency(3600),
	} {
		t.Run(name, func(t *testing.T) {
			o, err := MintOverride(mintedUnder, "dev", key, "bob", "stuck valve", minted)
			if err != nil {
				t.Fatal(err)
			}
			var now time.Time
			var refusals []AuditEvent
			a, err := New(emergency(60), Options{Now: func() time.Time { return now }, DeviceID: "dev", OverrideKey: key, Audit: func(e AuditEvent) {
				if e.Kind == AuditOverrideRefused {
					refusals = append(refusals, e)
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			now = minted.Add(ttl - time.Millisecond)
			p, err := a.Authenticate("Bearer " + o.Token)
			if err != nil || p.Role != "admin" || p.Method != MethodOverride {
				t.Fatalf("at TTL-1ms: %+v %v", p, err)
			}
			if want := minted.Add(ttl); !p.Expires.Equal(want) {
				t.Errorf("principal expires %s, want %s", p.Expires, want)
			}
			for _, at := range []time.Duration{ttl, ttl + time.Millisecond, ttl + Leeway - time.Millisecond} {
				now = minted.Add(at)
				if _, err := a.Authenticate("Bearer " + o.Token); err == nil {
					t.Errorf("accepted at TTL%+v", at-ttl)
				}
			}
			if len(refusals) != 3 {
				t.Errorf("%d refusals audited, want 3", len(refusals))
			}
		})
	}
}

// The leeway still covers an iat slightly ahead of this board's clock (a
// token minted elsewhere), without moving the end.
func TestOverrideMintedAheadIsUsable(t *testing.T) {
	key := NewOverrideKey()
	p := &policy.Policy{Emergency: &policy.Emergency{OverridePermission: "admin", OverrideTokenTTLSeconds: 60}}
	minted := time.Unix(1_700_000_000, 0)
	o, err := MintOverride(p, "dev", key, "bob", "stuck valve", minted)
	if err != nil {
		t.Fatal(err)
	}
	now := minted.Add(-5 * time.Second)
	a, err := New(p, Options{Now: func() time.Time { return now }, DeviceID: "dev", OverrideKey: key, Audit: func(AuditEvent) {}})
	if err != nil {
		t.Fatal(err)
	}
	pr, err := a.Authenticate("Bearer " + o.Token)
	if err != nil {
		t.Fatalf("minted 5 s ahead: %v", err)
	}
	if !pr.Expires.Equal(o.Expires) {
		t.Errorf("expires %s, want %s", pr.Expires, o.Expires)
	}
	now = o.Expires
	if _, err := a.Authenticate("Bearer " + o.Token); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("at exp: %v", err)
	}
}
