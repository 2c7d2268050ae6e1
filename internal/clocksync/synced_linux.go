package clocksync

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Synced asks the kernel (adjtimex without modes, which changes nothing):
// the clock is synchronised when an NTP client has cleared STA_UNSYNC. That
// is the flag systemd-timesyncd, chrony (with rtcsync, as Debian configures
// it) and ntpd all maintain, and what `timedatectl` shows as "System clock
// synchronized"; the kernel sets it again when no client has disciplined the
// clock for long enough that its error bound passes 16 s. The file
// /run/systemd/timesync/synchronized would only tell about timesyncd.
func Synced() (bool, error) {
	var tx unix.Timex
	if _, err := unix.Adjtimex(&tx); err != nil {
		return false, fmt.Errorf("adjtimex: %w", err)
	}
	return tx.Status&unix.STA_UNSYNC == 0, nil
}
