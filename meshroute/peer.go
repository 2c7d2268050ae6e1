package meshroute

import (
	"context"
	"fmt"

	"github.com/physmcp/physmcpd/auth"
)

// Refusal records a peer request refused because the node it names as its
// sender is not the node its mesh credential was minted for (or the
// credential names none): a holder of the keyring asking in another node's
// name. It is logged at WARN and given to Config.Audit.
type Refusal struct {
	Event      string `json:"mesh_event"` // always "peer_request_refused"
	Request    string `json:"request"`    // VoteMethod or "can_do"
	Credential string `json:"credential_node"`
	Named      string `json:"named_node"`
	Detail     string `json:"detail"`
}

// fromPeer admits a peer's request (a vote, a forwarded can_do) only from a
// caller that authenticated with a mesh credential (else notMember) minted
// for the node the request names as its sender (named, in field): both
// paths pass here, so neither can be asked in another node's name.
func (r *Router) fromPeer(ctx context.Context, request, field, named string, notMember error) error {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok || p.Method != auth.MethodMesh {
		return notMember
	}
	var err error
	switch {
	case p.Node == "":
		err = fmt.Errorf("%s refused: its mesh credential names no calling node (sub)", request)
	case named != p.Node:
		err = fmt.Errorf("%s refused: %s %q is not the node its mesh credential was minted for (%q)", request, field, named, p.Node)
	default:
		return nil
	}
	r.cfg.Logger.Warn("AUDIT mesh: a peer request in another node's name refused", "request", request,
		"credential_node", p.Node, "named_node", named, "err", err)
	if r.cfg.Audit != nil {
		r.cfg.Audit(Refusal{Event: "peer_request_refused", Request: request, Credential: p.Node, Named: named, Detail: err.Error()})
	}
	return err
}
