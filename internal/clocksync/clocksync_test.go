package clocksync

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

type answer struct {
	synced bool
	err    error
}

// Watch answers at once, follows the kernel's changes, reports each change
// once, and counts an unreadable state as synchronised.
func TestWatchFollowsTheClock(t *testing.T) {
	answers := make(chan answer)
	reports := make(chan answer, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := true
	check := func() (bool, error) {
		if first {
			first = false
			return false, nil
		}
		a := <-answers
		return a.synced, a.err
	}
	synced := Watch(ctx, time.Millisecond, check, func(ok bool, err error) { reports <- answer{ok, err} })
	if synced() {
		t.Fatal("synchronised before the kernel said so")
	}
	if r := <-reports; r.synced || r.err != nil {
		t.Fatalf("first report: %+v", r)
	}
	denied := errors.New("adjtimex: operation not permitted")
	for _, a := range []answer{{false, nil}, {true, nil}, {true, nil}, {false, denied}, {false, denied}, {false, nil}} {
		answers <- a
	}
	answers <- answer{false, nil} // the previous answer has been taken into account
	want := []answer{{true, nil}, {true, denied}, {false, nil}}
	for _, w := range want {
		if r := <-reports; r.synced != w.synced || !errors.Is(r.err, w.err) {
			t.Fatalf("report %+v, want %+v", r, w)
		}
	}
	if synced() {
		t.Fatal("still synchronised after the kernel said otherwise")
	}
	select {
	case r := <-reports:
		t.Fatalf("unexpected report %+v", r)
	default:
	}
}

// Reading the state needs no privilege (CAP_SYS_TIME is only for changes).
func TestSyncedAsksTheKernel(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	if _, err := Synced(); err != nil {
		t.Fatal(err)
	}
}
