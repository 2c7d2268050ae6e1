package telemetry

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/physmcp/physmcpd/internal/mqtt"
)

// Backoff bounds between publish attempts while the broker fails.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// publisher is what the queue publishes with (*mqtt.Client).
type publisher interface {
	Publish(ctx context.Context, msgs []mqtt.Message) error
	Close() error
}

// queue holds the latest unpublished message of each topic and publishes
// them from its own goroutine. For readings the latest value is what
// matters, unlike the audit trail, where every line must go: so a newer
// message replaces an older one of its topic, the queue never holds more
// than one message a topic, and Offer never waits for the broker.
type queue struct {
	pub publisher
	log *slog.Logger

	mu      sync.Mutex
	pending map[string]mqtt.Message // by topic
	wake    chan struct{}
	done    chan struct{}
	cancel  context.CancelFunc
}

func newQueue(pub publisher, log *slog.Logger) *queue {
	ctx, cancel := context.WithCancel(context.Background())
	q := &queue{pub: pub, log: log, pending: map[string]mqtt.Message{}, wake: make(chan struct{}, 1), done: make(chan struct{}), cancel: cancel}
	go q.run(ctx)
	return q
}

// Offer queues m in place of any unpublished message of its topic.
func (q *queue) Offer(m mqtt.Message) {
	q.mu.Lock()
	q.pending[m.Topic] = m
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take removes and returns every pending message, by topic.
func (q *queue) take() []mqtt.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	msgs := make([]mqtt.Message, 0, len(q.pending))
	for _, topic := range slices.Sorted(maps.Keys(q.pending)) {
		msgs = append(msgs, q.pending[topic])
	}
	clear(q.pending)
	return msgs
}

// putBack returns msgs that failed to the queue, except where a newer
// message of the topic came meanwhile.
func (q *queue) putBack(msgs []mqtt.Message) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range msgs {
		if _, newer := q.pending[m.Topic]; !newer {
			q.pending[m.Topic] = m
		}
	}
}

func (q *queue) run(ctx context.Context) {
	defer close(q.done)
	backoff := time.Duration(0)
	failing := 0 // consecutive failed attempts
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		msgs := q.take()
		if len(msgs) == 0 {
			continue
		}
		if err := q.pub.Publish(ctx, msgs); err != nil {
			q.putBack(msgs)
			if failing++; failing == 1 {
				q.log.Warn("telemetry: cannot publish; readings wait (the latest of each capability) and publishing is retried", "err", err)
			}
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			select { // try again even if nothing newer came
			case q.wake <- struct{}{}:
			default:
			}
			continue
		}
		if failing > 0 {
			q.log.Info("telemetry: publishing again", "failed_attempts", failing)
		}
		failing, backoff = 0, 0
	}
}

// close stops publishing and closes the publisher.
func (q *queue) close() error {
	q.cancel()
	<-q.done
	return q.pub.Close()
}
