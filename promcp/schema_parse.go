package promcp

import (
	"crypto/rand"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// ParseCanDo reads can_do arguments as a JSON decoder leaves them
// (map[string]any). It accepts PhysMCP's query and direction as aliases of
// intent and action, and rejects anything CanDoInputSchema does not allow,
// naming the field.
func ParseCanDo(args map[string]any) (CanDoRequest, error) {
	var req CanDoRequest
	if err := onlyKeys(args, "", "intent", "query", "scope", "max_candidates"); err != nil {
		return req, err
	}
	intentArg, hasIntent := args["intent"]
	queryArg, hasQuery := args["query"]
	field := "intent"
	switch {
	case hasIntent && hasQuery:
		return req, fmt.Errorf("give intent or its alias query, not both")
	case hasQuery:
		intentArg, field = queryArg, "query"
	case !hasIntent:
		return req, fmt.Errorf("intent (or its alias query) is required: {semantic_tags: [...], action: ..., target: ..., value: ...}")
	}
	intent, ok := intentArg.(map[string]any)
	if !ok {
		return req, fmt.Errorf("%s must be an object, not %s", field, jsonKind(intentArg))
	}
	if err := onlyKeys(intent, field+".", "semantic_tags", "action", "direction", "target", "value", "location"); err != nil {
		return req, err
	}

	tags, err := stringList(intent, field+".", "semantic_tags")
	if err != nil {
		return req, err
	}
	if len(tags) == 0 {
		return req, fmt.Errorf("%s.semantic_tags must list at least one tag", field)
	}
	req.Intent.SemanticTags = tags

	action, err := optionalString(intent, field+".", "action")
	if err != nil {
		return req, err
	}
	direction, err := optionalString(intent, field+".", "direction")
	if err != nil {
		return req, err
	}
	switch {
	case action != "" && direction != "" && action != direction:
		return req, fmt.Errorf("%s.action %q and its alias direction %q disagree", field, action, direction)
	case action == "":
		action = direction
	}
	if action != "" && !slices.Contains(Actions, action) {
		return req, fmt.Errorf("%s.action %q is not one of %s", field, action, strings.Join(Actions, ", "))
	}
	req.Intent.Action = action

	if req.Intent.Target, err = optionalString(intent, field+".", "target"); err != nil {
		return req, err
	}
	if req.Intent.Location, err = optionalString(intent, field+".", "location"); err != nil {
		return req, err
	}
	if v, ok := intent["value"]; ok {
		switch v.(type) {
		case float64, string, bool:
			req.Intent.Value = v
		default:
			return req, fmt.Errorf("%s.value must be a number, string or boolean, not %s", field, jsonKind(v))
		}
	}

	if req.Scope, err = stringList(args, "", "scope"); err != nil {
		return req, err
	}
	if v, ok := args["max_candidates"]; ok {
		n, isNumber := v.(float64)
		if !isNumber || n < 1 || n != math.Trunc(n) {
			return req, fmt.Errorf("max_candidates must be a whole number of at least 1, not %s", describe(v))
		}
		// More than any device has is the same as all of them.
		req.MaxCandidates = int(min(n, maxCandidatesAsked))
	}
	return req, nil
}

// maxCandidatesAsked bounds max_candidates so that it converts to int exactly.
const maxCandidatesAsked = 1 << 30

func describe(v any) string {
	if n, ok := v.(float64); ok {
		return Number(n)
	}
	return jsonKind(v)
}

func onlyKeys(obj map[string]any, prefix string, allowed ...string) error {
	var unknown []string
	for k := range obj {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, prefix+k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return fmt.Errorf("unknown field %s (allowed: %s%s)", strings.Join(unknown, ", "), prefix, strings.Join(allowed, ", "+prefix))
}

func stringList(obj map[string]any, prefix, key string) ([]string, error) {
	raw, ok := obj[key]
	if !ok {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("%s%s must be an array of strings, not %s", prefix, key, jsonKind(raw))
	}
	out := make([]string, len(list))
	for i, item := range list {
		s, ok := item.(string)
		if !ok || s == "" {
			return nil, fmt.Errorf("%s%s[%d] must be a non-empty string, not %s", prefix, key, i, jsonKind(item))
		}
		out[i] = s
	}
	return out, nil
}

func optionalString(obj map[string]any, prefix, key string) (string, error) {
	raw, ok := obj[key]
	if !ok {
		return "", nil
	}
	s, ok := raw.(string)
	if !ok {
		return "", fmt.Errorf("%s%s must be a string, not %s", prefix, key, jsonKind(raw))
	}
	return s, nil
}

func jsonKind(v any) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		if t == "" {
			return "an empty string"
		}
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// MalformedRequestReport is can_do's answer to arguments it cannot read: not
// feasible, explained by one unroutable entry whose detail says what is wrong.
func MalformedRequestReport(detail, deviceID string, now time.Time) CapabilityReport {
	return CapabilityReport{
		QueryID:    NewUUID(),
		Feasible:   false,
		Candidates: []Candidate{},
		Blocked:    []Blocked{},
		Unroutable: []Unroutable{{
			Outcome: OutcomeUnroutable,
			Reason:  MalformedRequest,
			Detail:  detail,
		}},
		Context:  ReportContext{RelatedReads: []string{}, CurrentObservations: map[string]any{}},
		Metadata: ReportMetadata{Timestamp: Time(now), DeviceID: deviceID, PromcpBase: BaseVersion},
	}
}

// NewUUID returns a random UUID (version 4), used for query ids and
// generated idempotency keys.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
