package engine

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An engine lock held for good (a deadlock) fails the health check at its
// deadline instead of hanging the watchdog.
func TestHealthAnswersByItsDeadline(t *testing.T) {
	e := &Engine{now: time.Now}
	e.cat.Store(&catalog{points: map[string]*point{}})
	e.deadMu.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := e.Health(ctx); !errors.Is(err, ErrUnhealthy) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with a lock held: got %v", err)
	}
	e.deadMu.Unlock()
	if err := e.Health(context.Background()); err != nil {
		t.Fatalf("with the lock free: %v", err)
	}
}
