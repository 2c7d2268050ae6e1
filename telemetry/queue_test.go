package telemetry

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/internal/mosquitto"
	"github.com/physmcp/physmcpd/internal/mqtt"
)

// While the broker is down Offer returns at once and the queue keeps only
// the latest message of each topic; when the broker is back that one goes,
// and a subscriber that comes later gets it as the retained message.
func TestQueueLatestWinsAcrossBrokerRestart(t *testing.T) {
	broker := mosquitto.Start(t)
	sub := mosquitto.Subscribe(t, broker.Addr, "telemetry-queue-test", "q/#")
	q := newQueue(mqtt.New(mqtt.Options{Addr: broker.Addr, ClientID: "physmcpd-queue-test", QoS: 1, Timeout: 2 * time.Second}),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer q.close()

	q.Offer(mqtt.Message{Topic: "q/a", Payload: []byte("1"), Retain: true})
	sub.WaitFor("q/a 1", func(m []mosquitto.Message) bool { return mosquitto.Count(m, "q/a", "1") == 1 })

	broker.Stop()
	start := time.Now()
	for _, v := range []string{"2", "3", "4"} {
		q.Offer(mqtt.Message{Topic: "q/a", Payload: []byte(v), Retain: true})
		time.Sleep(50 * time.Millisecond) // attempts fail in between
	}
	q.Offer(mqtt.Message{Topic: "q/b", Payload: []byte("x"), Retain: true})
	if d := time.Since(start); d > time.Second {
		t.Errorf("offering while the broker is down took %s", d)
	}
	broker.Restart()
	got := sub.WaitFor("q/a 4 and q/b x", func(m []mosquitto.Message) bool {
		return mosquitto.Count(m, "q/a", "4") == 1 && mosquitto.Count(m, "q/b", "x") == 1
	})
	for _, v := range []string{"2", "3"} {
		if mosquitto.Count(got, "q/a", v) != 0 {
			t.Errorf("q/a %s was published, though 4 replaced it while the broker was down: %v", v, got)
		}
	}

	late := mosquitto.Subscribe(t, broker.Addr, "telemetry-queue-late", "q/a")
	late.WaitFor("the retained q/a 4", func(m []mosquitto.Message) bool {
		return len(m) == 1 && m[0].Payload == "4" && m[0].Retained
	})
}

// At QoS 0 nothing acknowledges a message, so one written into a connection
// the broker closed would be lost without an error: the client finds the
// closed connection before publishing and connects again.
func TestQoS0AfterBrokerRestart(t *testing.T) {
	broker := mosquitto.Start(t)
	sub := mosquitto.Subscribe(t, broker.Addr, "telemetry-qos0-test", "q/#")
	q := newQueue(mqtt.New(mqtt.Options{Addr: broker.Addr, ClientID: "physmcpd-qos0-test", QoS: 0, Timeout: 2 * time.Second}),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer q.close()

	q.Offer(mqtt.Message{Topic: "q/a", Payload: []byte("1")})
	sub.WaitFor("q/a 1", func(m []mosquitto.Message) bool { return mosquitto.Count(m, "q/a", "1") == 1 })
	broker.Stop()
	broker.Restart()
	for deadline := time.Now().Add(10 * time.Second); !sub.Client.IsConnectionOpen(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the subscriber did not reconnect")
		}
	}
	q.Offer(mqtt.Message{Topic: "q/a", Payload: []byte("2")})
	sub.WaitFor("q/a 2", func(m []mosquitto.Message) bool { return mosquitto.Count(m, "q/a", "2") == 1 })
}
