package engine

import (
	"context"
	"errors"
	"testing"
	"time"
)

type budgetKey struct{}

func TestBudget(t *testing.T) {
	parent := context.WithValue(context.Background(), budgetKey{}, "v")

	b := newBudget(parent, time.Now().Add(20*time.Millisecond))
	if b.Value(budgetKey{}) != "v" {
		t.Fatal("the parent's values are lost")
	}
	if err := b.Err(); err != nil {
		t.Fatalf("Err before the deadline = %v", err)
	}
	select {
	case <-b.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done never closed at the deadline")
	}
	if !errors.Is(b.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err after the deadline = %v", b.Err())
	}
	b.end()

	// The parent's earlier deadline wins; cancelling the parent ends the budget.
	p, cancel := context.WithDeadline(parent, time.Now().Add(time.Hour))
	b = newBudget(p, time.Now().Add(2*time.Hour))
	if d, _ := b.Deadline(); !d.Before(time.Now().Add(90 * time.Minute)) {
		t.Fatalf("deadline %v, want the parent's", d)
	}
	done := b.Done()
	cancel()
	<-done
	if !errors.Is(b.Err(), context.Canceled) {
		t.Fatalf("Err after the parent's cancel = %v", b.Err())
	}
	b.end()

	// Ended, whether Done was asked for before or after.
	b = newBudget(parent, time.Now().Add(time.Hour))
	b.end()
	<-b.Done()
	if !errors.Is(b.Err(), context.Canceled) {
		t.Fatalf("Err after end = %v", b.Err())
	}
}
