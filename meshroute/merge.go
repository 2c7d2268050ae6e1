package meshroute

import (
	"slices"
	"strings"

	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/promcp"
)

// choose splits the peers that may serve req into those to ask now (alive,
// not visited, at most Fanout, the intent's location first) and those known
// offline (suspected, dead or gone), which are reported blocked unasked.
func (r *Router) choose(m Members, req promcp.CanDoRequest, hop Hop) (ask, offline []mesh.Peer) {
	self := m.Self()
	var devices []string
	peers := m.Peers()
	for _, s := range req.Scope {
		if slices.ContainsFunc(peers, func(p mesh.Peer) bool { return p.DeviceID == s }) {
			devices = append(devices, s)
		}
	}
	tags := make([]string, len(req.Intent.SemanticTags))
	for i, t := range req.Intent.SemanticTags {
		tags[i] = strings.ToLower(strings.TrimSpace(t))
	}
	loc := locationWords(req.Intent.Location)
	var matched []mesh.Peer
	for _, p := range peers {
		switch {
		case p.NodeID == self.NodeID || slices.Contains(hop.Visited, p.NodeID):
		case len(devices) > 0 && !slices.Contains(devices, p.DeviceID):
		case len(devices) == 0 && !p.Tags.MayHaveAny(tags):
		case len(loc) > 0 && !p.Tags.MayHaveAny(loc):
		case p.State == mesh.Alive:
			matched = append(matched, p)
		default:
			offline = append(offline, p)
		}
	}
	where := strings.ToLower(req.Intent.Location)
	slices.SortStableFunc(matched, func(a, b mesh.Peer) int {
		az, bz := where != "" && strings.ToLower(a.Zone) == where, where != "" && strings.ToLower(b.Zone) == where
		switch {
		case az && !bz:
			return -1
		case bz && !az:
			return 1
		}
		return strings.Compare(a.DeviceID, b.DeviceID)
	})
	return matched[:min(len(matched), r.cfg.Fanout)], offline
}

// locationWords are the tag-digest words a location may match: as written,
// and word by word (mesh.MatchWords puts both in a node's digest).
func locationWords(loc string) []string {
	loc = strings.TrimSpace(loc)
	if loc == "" {
		return nil
	}
	out := []string{mesh.LocationPrefix + strings.ToLower(loc)}
	for _, w := range mesh.Words(loc) {
		out = append(out, mesh.LocationPrefix+w)
	}
	return out
}

// offlineEntry is PhysMCP's device_offline for a peer that is not there (or
// did not answer): proMCP's source_unreachable, the PhysMCP word in the reason.
func offlineEntry(p mesh.Peer, why string) promcp.Blocked {
	details := "every capability of " + p.DeviceID + " that may match; ask again when it is back"
	return promcp.Blocked{
		Capability: "*", Source: p.DeviceID, DeviceID: p.DeviceID, Endpoint: p.Endpoint,
		Permission: promcp.SourceUnreachable, Reason: "device_offline: " + why, Details: &details,
	}
}

// unreachable reports whether b is an offlineEntry: a device that did not
// answer, rather than the device's own answer.
func unreachable(b promcp.Blocked) bool {
	return b.Capability == "*" && b.Permission == promcp.SourceUnreachable
}

// oneAccountPerDevice leaves one account of each device in out. A device
// that answered on some path (a candidate, or a blocked entry of its own
// policy) is not also unreachable because another path lost its answer or
// a node saw it offline: what it said wins, so it is never both a candidate
// and unreachable. A device nobody heard from is unreachable once, with the
// first reason given.
func oneAccountPerDevice(out *promcp.CapabilityReport) {
	answered := map[string]bool{}
	for _, c := range out.Candidates {
		answered[c.DeviceID] = true
	}
	for _, b := range out.Blocked {
		if !unreachable(b) {
			answered[b.DeviceID] = true
		}
	}
	listed := map[string]bool{}
	out.Blocked = slices.DeleteFunc(out.Blocked, func(b promcp.Blocked) bool {
		if !unreachable(b) {
			return false
		}
		drop := answered[b.DeviceID] || listed[b.DeviceID]
		listed[b.DeviceID] = true
		return drop
	})
}

func key(device, capability string) string { return device + "\x00" + capability }

// merge adds a peer's report to out, each device's entries once (the same
// device may answer on two paths), naming where to call them. It reports
// whether the peer had anything for the query.
func merge(out *promcp.CapabilityReport, p mesh.Peer, rep promcp.CapabilityReport, seen map[string]bool) bool {
	found := false
	for _, c := range rep.Candidates {
		if first(&c.DeviceID, &c.Endpoint, c.Source, c.Capability, p, seen) {
			out.Candidates = append(out.Candidates, c)
			found = true
		}
	}
	for _, b := range rep.Blocked {
		if first(&b.DeviceID, &b.Endpoint, b.Source, b.Capability, p, seen) {
			out.Blocked = append(out.Blocked, b)
			found = true
		}
	}
	out.Metadata.Omitted = promcp.MergeOmitted(out.Metadata.Omitted, rep.Metadata.Omitted)
	for _, rr := range rep.Context.RelatedReads {
		if !strings.Contains(rr, ".") {
			rr = p.DeviceID + "." + rr // PhysMCP names remote reads node.tool
		}
		if !slices.Contains(out.Context.RelatedReads, rr) {
			out.Context.RelatedReads = append(out.Context.RelatedReads, rr)
		}
	}
	if len(rep.Context.CurrentObservations) > 0 {
		obs := make(map[string]any, len(out.Context.CurrentObservations)+len(rep.Context.CurrentObservations))
		for k, v := range out.Context.CurrentObservations {
			obs[k] = v
		}
		for k, v := range rep.Context.CurrentObservations {
			if !strings.Contains(k, ".") {
				k = p.DeviceID + "." + k
			}
			obs[k] = v
		}
		out.Context.CurrentObservations = obs
	}
	return found
}

// first names the device and endpoint of an entry that came from peer p
// (when the entry does not already) and reports whether it is the first
// entry for that device and capability.
func first(device, endpoint *string, source, capability string, p mesh.Peer, seen map[string]bool) bool {
	if *device == "" {
		*device = orElse(source, p.DeviceID)
	}
	if *endpoint == "" {
		*endpoint = p.Endpoint
	}
	if seen[key(*device, capability)] || seen[key(*device, "")] {
		return false
	}
	seen[key(*device, capability)] = true
	return true
}

func orElse(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}
