//go:build !linux

package clocksync

import "errors"

// Synced cannot tell on this system.
func Synced() (bool, error) {
	return false, errors.New("the clock's synchronisation is only known on Linux")
}
