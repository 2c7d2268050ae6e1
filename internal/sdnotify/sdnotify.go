// Package sdnotify speaks systemd's notify protocol (sd_notify(3)) with the
// standard library: one datagram per state change to $NOTIFY_SOCKET, and the
// interval at which systemd wants WATCHDOG=1 keep-alives.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// Env is the part of the environment the protocol reads; tests pass their own.
type Env func(key string) string

// Notifier sends states to one socket. The zero socket means "not started by
// systemd" and every send is a no-op.
type Notifier struct {
	socket string
	env    Env
}

// New reads $NOTIFY_SOCKET through env (os.Getenv when nil).
func New(env Env) *Notifier {
	if env == nil {
		env = os.Getenv
	}
	return &Notifier{socket: env("NOTIFY_SOCKET"), env: env}
}

// Enabled reports whether a service manager is listening.
func (n *Notifier) Enabled() bool { return n.socket != "" }

// Send sends one state ("READY=1", "STOPPING=1", "WATCHDOG=1", ...).
// An abstract socket ("@name") is handled by the net package.
func (n *Notifier) Send(state string) error {
	if n.socket == "" {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.socket, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify %s: %w", n.socket, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", n.socket, err)
	}
	return nil
}

// WatchdogInterval is how often to send WATCHDOG=1: half of $WATCHDOG_USEC,
// when the watchdog is on and meant for this process ($WATCHDOG_PID unset or
// ours). ok is false when there is no watchdog; err when the variables are
// malformed.
func (n *Notifier) WatchdogInterval() (interval time.Duration, ok bool, err error) {
	usec := n.env("WATCHDOG_USEC")
	if usec == "" || n.socket == "" {
		return 0, false, nil
	}
	if pid := n.env("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0, false, nil
	}
	us, err := strconv.ParseInt(usec, 10, 64)
	if err != nil || us <= 0 {
		return 0, false, fmt.Errorf("WATCHDOG_USEC=%q: want a positive number of microseconds", usec)
	}
	return time.Duration(us) * time.Microsecond / 2, true, nil
}
