// Package clocksync tells whether the system clock has been set by a time
// source. A board without a real-time clock (most Raspberry Pis) boots at the
// epoch or at the time fake-hwclock saved on shutdown, and keeps that until
// an NTP client sets it; timestamps taken before then are wrong.
package clocksync

import (
	"context"
	"sync/atomic"
	"time"
)

// Interval is how often Watch asks the kernel: the clock is set once, early,
// so a few seconds of lag are of no account.
const Interval = 5 * time.Second

// Watch asks check now and then every interval until ctx ends, and returns a
// function that reports the latest answer without a system call (the engine
// asks it before every read). report receives the first answer and every
// change, and err whenever it is new: a clock whose state cannot be read
// counts as synchronised, since flagging every reading for a sandbox setting
// (ProtectClock=) would hide the readings that are really wrong.
func Watch(ctx context.Context, interval time.Duration, check func() (bool, error), report func(synced bool, err error)) func() bool {
	var synced atomic.Bool
	var asked, lastOK bool
	var lastErr string
	ask := func() {
		ok, err := check()
		errText := ""
		if err != nil {
			ok, errText = true, err.Error()
		}
		synced.Store(ok)
		if !asked || ok != lastOK || errText != lastErr {
			report(ok, err)
		}
		asked, lastOK, lastErr = true, ok, errText
	}
	ask()
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				ask()
			}
		}
	}()
	return synced.Load
}
