package i2c

import (
	"fmt"

	"golang.org/x/sys/unix"
)

const ioctlI2CTimeout = 0x702 // I2C_TIMEOUT, in units of 10 ms

// setAdapterTimeout sets how long the kernel waits for the adapter (clock
// stretching, arbitration) before a transaction fails. The setting belongs to
// the adapter, not to the file descriptor, and periph does not expose its
// descriptor, so a short-lived one is used.
func setAdapterTimeout(path string, ms int) error {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("setting timeout_ms: opening %s: %w", path, err)
	}
	defer unix.Close(fd)
	// Rounded up: the kernel counts tens of milliseconds.
	if err := unix.IoctlSetInt(fd, ioctlI2CTimeout, (ms+9)/10); err != nil {
		return fmt.Errorf("setting timeout_ms on %s (I2C_TIMEOUT): %w", path, err)
	}
	return nil
}
