package mosquitto

import (
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// Subscriber records what a paho client receives on a topic filter.
type Subscriber struct {
	t      testing.TB
	Client paho.Client

	mu   sync.Mutex
	msgs []Message
	more chan struct{}
}

// Message is one message received.
type Message struct {
	Topic, Payload string
	Retained       bool
	// Dup: the broker sent it again to the subscriber's session (its
	// acknowledgement was lost when the broker stopped).
	Dup bool
}

// Subscribe connects a paho client with a persistent session (so messages
// published while the broker restarts reach it), subscribes at QoS 1 and
// records what arrives.
func Subscribe(t testing.TB, addr, id, filter string) *Subscriber {
	t.Helper()
	s := &Subscriber{t: t, more: make(chan struct{}, 1)}
	s.Client = SubscribeFunc(t, addr, id, filter, func(m Message) {
		s.mu.Lock()
		s.msgs = append(s.msgs, m)
		s.mu.Unlock()
		select {
		case s.more <- struct{}{}:
		default:
		}
	})
	return s
}

// SubscribeFunc is Subscribe with fn called for each message instead; it
// returns once subscribed, and the client disconnects when the test ends.
func SubscribeFunc(t testing.TB, addr, id, filter string, fn func(Message)) paho.Client {
	t.Helper()
	ready := make(chan struct{}, 1)
	c := paho.NewClient(paho.NewClientOptions().
		AddBroker("tcp://" + addr).
		SetClientID(id).
		SetCleanSession(false).
		SetAutoReconnect(true).
		SetMaxReconnectInterval(100 * time.Millisecond).
		SetOnConnectHandler(func(c paho.Client) {
			c.Subscribe(filter, 1, func(_ paho.Client, m paho.Message) {
				fn(Message{m.Topic(), string(m.Payload()), m.Retained(), m.Duplicate()})
			}).Wait()
			select {
			case ready <- struct{}{}:
			default:
			}
		}))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscriber connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(0) })
	<-ready
	return c
}

// Received returns what has arrived so far.
func (s *Subscriber) Received() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.msgs...)
}

// WaitFor waits until ok holds for what has arrived, or fails.
func (s *Subscriber) WaitFor(what string, ok func([]Message) bool) []Message {
	s.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		got := s.Received()
		if ok(got) {
			return got
		}
		select {
		case <-s.more:
		case <-deadline:
			s.t.Fatalf("waiting for %s; received %v", what, got)
		}
	}
}

// Count is how many of msgs have topic and payload.
func Count(msgs []Message, topic, payload string) int {
	n := 0
	for _, m := range msgs {
		if m.Topic == topic && m.Payload == payload {
			n++
		}
	}
	return n
}
