package drivers

import "sync/atomic"

// LateReply is the error of an in-doubt write (found with errors.As) whose
// transport still listens for the device's reply to the frame it gave up
// on: on Modbus TCP the reply may still come on the connection the frame
// went out on (a gateway that held the frame and applies it late). Done is
// closed when listening ends; Applied says whether that reply confirmed the
// write, which proves the device applied it. Any other end (the connection
// closed, another reply, the bus's late_write_ms passed) proves nothing
// either way.
type LateReply struct {
	Err     error
	done    chan struct{}
	applied atomic.Bool
}

// NewLateReply is err, while the transport listens for the reply.
func NewLateReply(err error) *LateReply { return &LateReply{Err: err, done: make(chan struct{})} }

func (l *LateReply) Error() string { return l.Err.Error() }
func (l *LateReply) Unwrap() error { return l.Err }

// Done is closed when the transport has stopped listening.
func (l *LateReply) Done() <-chan struct{} { return l.done }

// Applied says whether the reply has confirmed the write (false while
// listening). A nil LateReply never does.
func (l *LateReply) Applied() bool { return l != nil && l.applied.Load() }

// End is the transport's: listening is over, and applied says whether the
// reply confirmed the write. It is called once.
func (l *LateReply) End(applied bool) {
	l.applied.Store(applied)
	close(l.done)
}
