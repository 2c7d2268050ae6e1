package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config is one node's membership configuration. serve builds it from the
// manifest's network.mesh and the device; tests build it directly.
type Config struct {
	// NodeID names the node in the mesh; default DeviceID. It must be
	// unique: a second node claiming it is refused (and logged).
	NodeID   string
	DeviceID string
	Zone     string
	Profile  string
	// Endpoint is the node's MCP endpoint URL ("" when it serves none).
	Endpoint string
	// CapsHash and Tags describe the device (Describe, Digest(MatchWords)).
	CapsHash string
	Tags     TagDigest

	// BindAddr and BindPort are where gossip listens, UDP and TCP; port 0
	// picks a free one. AdvertiseAddr is the address peers are told (default:
	// BindAddr, or a private address of this host when BindAddr is 0.0.0.0).
	BindAddr      string
	BindPort      int
	AdvertiseAddr string
	// SeedPeers are HOST or HOST:PORT (default port 7946), joined first.
	SeedPeers []string
	// MaxPeers bounds this node's member list; further nodes are refused.
	MaxPeers int
	// HeartbeatInterval is PhysMCP's heartbeat_interval_ms (see Timing).
	HeartbeatInterval time.Duration
	// MDNS advertises and browses _physmcp._tcp.
	MDNS bool
	// Keys is the gossip keyring (AES keys), the first one used to send;
	// nil sends in the clear (loopback only: manifest validation insists).
	Keys [][]byte

	Logger *slog.Logger

	// transport replaces UDP and TCP on BindAddr: tests' in-memory network,
	// on which a synctest bubble's clock runs the protocol's timers.
	transport memberlist.NodeAwareTransport
}

// Timing is how PhysMCP's heartbeat semantics map onto memberlist's SWIM
// failure detector for a mesh of n nodes (including this one).
//
// A heartbeat is one probe round: every Interval each node probes one peer
// (round robin over a shuffled list), so with n nodes each peer is probed
// about once per Interval by someone. A probe is a UDP ping answered within
// ProbeTimeout (Interval/3; see Slowed for why), else three indirect pings
// through other peers and a TCP ping, all within the Interval: a failed probe
// is several missed heartbeats at once, and memberlist marks the peer suspect
// after the first one.
// PhysMCP's "3 misses → suspected" is therefore a duration, SuspectWithin =
// 3·Interval from the death to the first failed probe, not a counter.
// It is what the n−1 probers usually achieve, not a bound: each probes its
// n−1 peers once per round, in an order it shuffles again every round, so a
// given prober may come back to a peer only 2(n−1)−1 heartbeats after its
// previous probe, and a peer that dies just after it was probed by all of
// them is suspected SuspectAtLatest = 2(n−1)·Interval after its death (at
// least SuspectWithin) when the last of those probes fails.
// PhysMCP's "5 misses → dead" is the suspicion timeout: a suspect that does
// not refute within DeadAfter = 2·Interval·max(1, log10 n) of the
// suspicion is declared dead (SuspicionMult 2, and SuspicionMaxTimeoutMult 1
// so that the timeout does not wait for confirmations a small mesh cannot
// give): usually dead within 5 heartbeats of the death in meshes under 10
// nodes, at the latest SuspectAtLatest + DeadAfter.
//
// News of a node (its join, its death) reaches the others by gossip within
// a few gossip intervals, but each node passes it on only a few times
// (memberlist's RetransmitMult), to random peers, over UDP: a node can miss
// it, and then learns it only when it next exchanges its whole member list
// with a random peer over TCP (memberlist's push-pull): every FullSync, the
// first time between FullSync and 2·FullSync after it started. With
// memberlist's LAN default of 30 s, a node that missed a join went without
// that peer for 30 to 60 s (on the in-memory network, about 1 start of 5
// nodes in 140 left one node without one peer for 20 s), against PhysMCP's
// convergence goal of 5 s. FullSync = 2·Interval repairs it within 4
// heartbeats of the start and 2 afterwards, for one small TCP exchange per
// node every 2 heartbeats.
//
// These bounds hold for healthy probers, whose memberlist health score
// (Lifeguard's self-awareness) is 0; Slowed gives them at another score.
type Timing struct {
	Interval        time.Duration
	ProbeTimeout    time.Duration
	SuspectWithin   time.Duration
	SuspectAtLatest time.Duration
	DeadAfter       time.Duration
	FullSync        time.Duration
}

// suspicionMult sets DeadAfter to 2 heartbeats (times log10 n from 10 nodes on).
const suspicionMult = 2

// awarenessMax is memberlist's AwarenessMaxMultiplier: health scores run from
// 0 to MaxHealthScore.
const awarenessMax = 8

// MaxHealthScore is the highest health score (Status.Health) a node reaches.
const MaxHealthScore = awarenessMax - 1

// Slowed is t as a node with memberlist health score score applies it. A
// probe that gets no ack waits until (score+1)·Interval after it was sent,
// not Interval, before the node suspects the peer, so SuspectWithin and
// SuspectAtLatest grow by score·Interval. memberlist v0.7.0 scales neither
// ProbeTimeout (the direct ping's wait) nor the suspicion timeout (DeadAfter).
//
// The score rises by one when the node refutes a suspicion of itself and, on
// a failed probe, by one per relay whose nack did not arrive in time (one
// when there is no relay); it falls by one per successful probe, about once
// per Interval. A relay sends its nack ProbeTimeout after it got the
// indirect ping request, which the prober sent ProbeTimeout after its ping:
// the nack arrives 2·ProbeTimeout after the ping and must beat the prober's
// deadline, Interval at score 0. ProbeTimeout = Interval/3 gives a third of
// the Interval each to the direct ping, the relay's ping and the nack's way
// back. With Interval/2 (memberlist's LAN proportion) every nack came just
// too late: probing a dead or hung peer raised even a healthy node's score
// by up to 3 (its relays), so the next failure it probed was suspected up to
// 3 heartbeats later.
func (t Timing) Slowed(score int) Timing {
	slower := time.Duration(min(max(score, 0), awarenessMax-1)) * t.Interval
	t.SuspectWithin += slower
	t.SuspectAtLatest += slower
	return t
}

// TimingFor returns the timing of a mesh of n nodes with heartbeat interval hb.
func TimingFor(hb time.Duration, n int) Timing {
	scale := math.Max(1, math.Log10(math.Max(1, float64(n))))
	return Timing{
		Interval:        hb,
		ProbeTimeout:    hb / 3,
		SuspectWithin:   3 * hb,
		SuspectAtLatest: time.Duration(max(3, 2*(n-1))) * hb,
		DeadAfter:       time.Duration(float64(suspicionMult*hb) * scale),
		FullSync:        2 * hb,
	}
}

func (c *Config) check() error {
	if c.DeviceID == "" {
		return errors.New("mesh: no device id")
	}
	if c.NodeID == "" {
		c.NodeID = c.DeviceID
	}
	if c.HeartbeatInterval <= 0 {
		return errors.New("mesh: the heartbeat interval must be positive")
	}
	if c.MaxPeers <= 0 {
		return errors.New("mesh: max peers must be positive")
	}
	if c.BindAddr == "" {
		c.BindAddr = "0.0.0.0"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if len(c.Keys) > 0 {
		if _, err := memberlist.NewKeyring(c.Keys, c.Keys[0]); err != nil {
			return fmt.Errorf("mesh: keyring: %v", err)
		}
	}
	return nil
}

// memberlistConfig maps c onto memberlist (the mapping of Timing).
func (c *Config) memberlistConfig() (*memberlist.Config, error) {
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.NodeID
	mc.BindAddr, mc.BindPort = c.BindAddr, c.BindPort
	mc.AdvertiseAddr, mc.AdvertisePort = c.AdvertiseAddr, c.BindPort
	t := TimingFor(c.HeartbeatInterval, 1)
	mc.ProbeInterval = t.Interval
	mc.ProbeTimeout = t.ProbeTimeout
	mc.PushPullInterval = t.FullSync
	mc.SuspicionMult = suspicionMult
	mc.SuspicionMaxTimeoutMult = 1
	mc.AwarenessMaxMultiplier = awarenessMax
	// Gossip five times per heartbeat, so news outruns the next probe.
	mc.GossipInterval = max(c.HeartbeatInterval/5, 20*time.Millisecond)
	// A join or a TCP ping that takes two heartbeats has failed.
	mc.TCPTimeout = max(2*c.HeartbeatInterval, time.Second)
	// A device that comes back at another address may take its name back
	// once its old self has been dead for a while.
	mc.DeadNodeReclaimTime = 10 * c.HeartbeatInterval
	// Labelled packets: a memberlist cluster of another program on the
	// same port is not mistaken for a mesh.
	mc.Label = "physmcp"
	if len(c.Keys) > 0 {
		kr, err := memberlist.NewKeyring(c.Keys, c.Keys[0])
		if err != nil {
			return nil, err
		}
		mc.Keyring = kr
	}
	mc.Logger = log.New(&levelWriter{log: c.Logger}, "", 0)
	if c.transport != nil {
		mc.Transport = c.transport
	}
	return mc, nil
}

// levelWriter forwards the "[LEVEL] text" lines of memberlist's and mdns's
// loggers to slog at that level; the chatty ones at debug.
type levelWriter struct{ log *slog.Logger }

var _ io.Writer = (*levelWriter)(nil)

func (w *levelWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for prefix, l := range map[string]slog.Level{"[DEBUG]": slog.LevelDebug, "[INFO]": slog.LevelDebug,
		"[WARN]": slog.LevelWarn, "[ERR]": slog.LevelWarn, "[ERROR]": slog.LevelWarn} {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			line, level = strings.TrimSpace(rest), l
			break
		}
	}
	if strings.Contains(line, "use of closed network connection") {
		level = slog.LevelDebug // memberlist's gossip racing its own shutdown
	}
	w.log.Log(context.Background(), level, "mesh: "+line)
	return len(p), nil
}

// seedAddr adds the default port to a seed given as HOST.
func seedAddr(s string) string {
	if _, _, err := net.SplitHostPort(s); err == nil {
		return s
	}
	return net.JoinHostPort(strings.Trim(s, "[]"), fmt.Sprint(DefaultPort))
}

// DefaultPort is the gossip port when none is given.
const DefaultPort = 7946
