package audit

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// MAC names the keyed chain's algorithm in HEAD, ANCHOR and the keyed event.
const MAC = "hmac-sha256"

// EventKeyed is the "event" of the line where a trail becomes keyed: its own
// chain value and every later one is an HMAC under the key it names by id.
const EventKeyed = "keyed"

// keyBytes is the size of a new key (HMAC-SHA256's block is larger, its
// output this size: more adds nothing).
const keyBytes = 32

// Key keys the chain: with one, each line's chain value is the HMAC-SHA256 of
// the line under the key instead of its plain SHA-256, so only a holder of
// the key can recompute the chain after editing a line.
type Key struct {
	secret []byte
	id     string
}

// ID names the key without revealing it: the first 8 bytes of the HMAC of a
// fixed label, in hex. A trail records it so the wrong key is told apart from
// a broken chain.
func (k *Key) ID() string { return k.id }

func newKey(secret []byte) *Key {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("physmcpd audit key id"))
	return &Key{secret: secret, id: hex.EncodeToString(m.Sum(nil)[:8])}
}

// sum is the chain value of line: its HMAC under k, or its SHA-256 when k is
// nil (a plain chain).
func (k *Key) sum(line []byte) string {
	if k == nil {
		return hashLine(line)
	}
	m := hmac.New(sha256.New, k.secret)
	m.Write(line)
	return hex.EncodeToString(m.Sum(nil))
}

// LoadKey reads a key file: the key in hex (at least 16 bytes), one line.
func LoadKey(path string) (*Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	secret, err := hex.DecodeString(string(bytes.TrimSpace(b)))
	if err != nil {
		return nil, fmt.Errorf("audit key %s: want the key in hex: %w", path, err)
	}
	if len(secret) < 16 {
		return nil, fmt.Errorf("audit key %s: %d bytes, want at least 16", path, len(secret))
	}
	return newKey(secret), nil
}

// LoadOrCreateKey reads the key file at path, creating it (0600, a new
// random key) when there is none; created says it was.
func LoadOrCreateKey(path string) (k *Key, created bool, err error) {
	k, err = LoadKey(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return k, false, err
	}
	secret := make([]byte, keyBytes)
	if _, err := rand.Read(secret); err != nil {
		return nil, false, fmt.Errorf("audit key: %w", err)
	}
	// O_EXCL: two daemons racing on a fresh directory must not end up with two keys
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		k, err = LoadKey(path)
		return k, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("audit key: %w", err)
	}
	_, werr := f.WriteString(hex.EncodeToString(secret) + "\n")
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(path)
		return nil, false, fmt.Errorf("audit key: write %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return nil, false, err
	}
	return newKey(secret), true, nil
}

// KeyError says the trail cannot be opened or checked with the key given:
// it is keyed and no key was given, or it is keyed under another key.
type KeyError struct {
	Dir, Want, Got string // key ids; Got is "" when no key was given
}

func (e *KeyError) Error() string {
	if e.Got == "" {
		return fmt.Sprintf("the audit trail in %s is keyed (%s, key id %s) and no key was given", e.Dir, MAC, e.Want)
	}
	return fmt.Sprintf("the audit trail in %s is keyed with key id %s, but the key given has id %s", e.Dir, e.Want, e.Got)
}

// Option configures Open and Verify.
type Option func(*options)

type options struct{ key *Key }

// WithKey keys the chain with k (nil: a plain SHA-256 chain). Open makes a
// plain trail keyed from its next line on; Verify requires a keyed trail.
func WithKey(k *Key) Option { return func(o *options) { o.key = k } }

func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
