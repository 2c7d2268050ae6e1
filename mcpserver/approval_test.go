//go:build !lite

package mcpserver_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/drivers/sim"
)

func startApprovalDevice(t *testing.T) *accessDevice {
	t.Helper()
	data, err := os.ReadFile("testdata/access/approval.policy.yml")
	if err != nil {
		t.Fatal(err)
	}
	return startAccessDevice(t, string(data), nil, nil, 0)
}

// person answers approval forms.
type person struct {
	mu     sync.Mutex
	asked  []mcp.ElicitationParams
	answer func(mcp.ElicitationParams) *mcp.ElicitationResult
}

func (p *person) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	p.mu.Lock()
	p.asked = append(p.asked, req.Params)
	p.mu.Unlock()
	return p.answer(req.Params), nil
}

func answering(action mcp.ElicitationResponseAction, approve bool) func(mcp.ElicitationParams) *mcp.ElicitationResult {
	return func(mcp.ElicitationParams) *mcp.ElicitationResult {
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: action, Content: map[string]any{"approve": approve}}}
	}
}

// wire records (and may rewrite) the retried tools/call that carries the
// approval state, as a misbehaving client or a man in the middle could.
type wire struct {
	mu      sync.Mutex
	rewrite func([]byte) []byte
	retries []*http.Request
	bodies  [][]byte
}

func (w *wire) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		if bytes.Contains(b, []byte(`"requestState"`)) {
			if w.rewrite != nil {
				b = w.rewrite(b)
			}
			w.mu.Lock()
			w.retries = append(w.retries, r.Clone(context.Background()))
			w.bodies = append(w.bodies, b)
			w.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
	}
	return http.DefaultTransport.RoundTrip(r)
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// Accepted: exactly one write, on the current protocol (input_required and a
// retry carrying the state) and on 2025-06-18 (a server-initiated elicitation).
func TestApprovalAcceptWritesOnce(t *testing.T) {
	for _, version := range []string{"", "2025-06-18"} {
		t.Run("protocol "+version, func(t *testing.T) {
			d := startApprovalDevice(t)
			who := &person{answer: answering(mcp.ElicitationResponseActionAccept, true)}
			opts := []client.ClientOption{client.WithElicitationHandler(who)}
			if version != "" {
				opts = append(opts, client.WithProtocolVersion(version))
			}
			w := &wire{}
			c := d.connect(t, nil, &http.Client{Transport: w}, opts...)
			if _, err := callDo(t, c, "read_boiler_setpoint", nil); err != nil {
				t.Fatal(err)
			}
			res, err := callDo(t, c, "do_boiler_setpoint", map[string]any{"value": 55})
			if err != nil || res.IsError {
				t.Fatalf("approved do_: %v %s", err, resultText(res))
			}
			// Before 2026-07-28 the server asks (elicitation/create), and the
			// client never retries with the state (mcp-go's client would, but
			// older clients cannot).
			if retried := len(w.retries) > 0; retried != (version == "") {
				t.Errorf("the call was retried with its state: %v", retried)
			}
			if n := d.bus.writes.Load(); n != 1 {
				t.Errorf("%d writes, want 1", n)
			}
			if len(who.asked) != 1 {
				t.Fatalf("asked %d times", len(who.asked))
			}
			msg := who.asked[0].Message
			for _, want := range []string{"do_boiler_setpoint", "New value: 55 °C", "Previous value: 40 °C", "radiators heat up or cool down", "expires in 30s"} {
				if !strings.Contains(msg, want) {
					t.Errorf("form message lacks %q:\n%s", want, msg)
				}
			}
		})
	}
}

// Declined, or accepted without ticking approve: nothing is written.
func TestApprovalDeclineWritesNothing(t *testing.T) {
	for name, answer := range map[string]func(mcp.ElicitationParams) *mcp.ElicitationResult{
		"decline":         answering(mcp.ElicitationResponseActionDecline, false),
		"cancel":          answering(mcp.ElicitationResponseActionCancel, false),
		"accept unticked": answering(mcp.ElicitationResponseActionAccept, false),
		"accept no answer": func(mcp.ElicitationParams) *mcp.ElicitationResult {
			return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			d := startApprovalDevice(t)
			c := d.connect(t, nil, nil, client.WithElicitationHandler(&person{answer: answer}))
			res, err := callDo(t, c, "do_boiler_setpoint", map[string]any{"value": 55})
			if err != nil || !res.IsError || !strings.Contains(resultText(res), "requires_human_approval") || !strings.Contains(resultText(res), "declined") {
				t.Errorf("declined do_: %v %s", err, resultText(res))
			}
			if n := d.bus.writes.Load(); n != 0 {
				t.Errorf("%d writes, want 0", n)
			}
		})
	}
}

// A client that cannot show a form gets the refusal and nothing is written.
func TestApprovalWithoutElicitation(t *testing.T) {
	d := startApprovalDevice(t)
	c := d.connect(t, nil, nil)
	res, err := callDo(t, c, "do_boiler_setpoint", map[string]any{"value": 55})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "cannot ask a person") {
		t.Errorf("do_ without elicitation: %v %s", err, resultText(res))
	}
	if n := d.bus.writes.Load(); n != 0 {
		t.Errorf("%d writes, want 0", n)
	}
}

// The approved retry sent again is refused: a state is good for one call.
func TestApprovalReplayRefused(t *testing.T) {
	d := startApprovalDevice(t)
	w := &wire{}
	c := d.connect(t, nil, &http.Client{Transport: w}, client.WithElicitationHandler(&person{answer: answering(mcp.ElicitationResponseActionAccept, true)}))
	if res, err := callDo(t, c, "do_boiler_setpoint", map[string]any{"value": 55, "idempotency_key": "k-1"}); err != nil || res.IsError {
		t.Fatalf("approved do_: %v %s", err, resultText(res))
	}
	if len(w.retries) != 1 {
		t.Fatalf("%d retries carried a state, want 1", len(w.retries))
	}
	replay := w.retries[0]
	replay.Body = io.NopCloser(bytes.NewReader(w.bodies[0]))
	replay.ContentLength = int64(len(w.bodies[0]))
	replay.RequestURI = ""
	resp, err := http.DefaultClient.Do(replay)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "already used") {
		t.Errorf("replayed approval: %d %s", resp.StatusCode, body)
	}
	if n := d.bus.writes.Load(); n != 1 {
		t.Errorf("%d writes after the replay, want 1", n)
	}
}

var statePayload = regexp.MustCompile(`("requestState":")([A-Za-z0-9_-])`)

// A state altered on the way, or an approval moved to other arguments, is
// refused and nothing is written.
func TestApprovalTamperedRefused(t *testing.T) {
	cases := map[string]struct {
		rewrite func([]byte) []byte
		want    string
	}{
		"altered state": {func(b []byte) []byte {
			return statePayload.ReplaceAllFunc(b, func(m []byte) []byte {
				last := m[len(m)-1]
				flipped := byte('A')
				if last == 'A' {
					flipped = 'B'
				}
				return append(m[:len(m)-1:len(m)-1], flipped)
			})
		}, "altered"},
		"other value": {func(b []byte) []byte { return bytes.Replace(b, []byte(`"value":55`), []byte(`"value":75`), 1) }, "different call"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			d := startApprovalDevice(t)
			w := &wire{rewrite: c.rewrite}
			cl := d.connect(t, nil, &http.Client{Transport: w}, client.WithElicitationHandler(&person{answer: answering(mcp.ElicitationResponseActionAccept, true)}))
			res, err := callDo(t, cl, "do_boiler_setpoint", map[string]any{"value": 55})
			if len(w.retries) != 1 {
				t.Fatalf("%d retries carried a state", len(w.retries))
			}
			if err != nil || !res.IsError || !strings.Contains(resultText(res), c.want) {
				t.Errorf("tampered approval: %v %s", err, resultText(res))
			}
			if n := d.bus.writes.Load(); n != 0 {
				t.Errorf("%d writes, want 0", n)
			}
		})
	}
}

// An answer after the rule's timeout_s is refused.
func TestApprovalExpired(t *testing.T) {
	d := startApprovalDevice(t)
	late := func(p mcp.ElicitationParams) *mcp.ElicitationResult {
		d.clock.Advance(31 * time.Second)
		return answering(mcp.ElicitationResponseActionAccept, true)(p)
	}
	c := d.connect(t, nil, nil, client.WithElicitationHandler(&person{answer: late}))
	res, err := callDo(t, c, "do_boiler_setpoint", map[string]any{"value": 55})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "expired") {
		t.Errorf("late approval: %v %s", err, resultText(res))
	}
	if n := d.bus.writes.Load(); n != 0 {
		t.Errorf("%d writes, want 0", n)
	}
}

// byHand changes the boiler's setpoint on the device itself, as someone at
// its panel would: not through physmcpd, so the bus counts no write.
func (d *accessDevice) byHand(v float64) error {
	return d.bus.ModbusBus.(*sim.Modbus).SetValue("boiler_setpoint", v)
}

// The form shows what the device holds now, not the read cache: a reading
// of 40 taken just before, then 47 set at the panel, shows 47.
func TestApprovalFormShowsFreshValue(t *testing.T) {
	d := startApprovalDevice(t)
	who := &person{answer: answering(mcp.ElicitationResponseActionAccept, true)}
	c := d.connect(t, nil, nil, client.WithElicitationHandler(who))
	if res, err := callDo(t, c, "read_boiler_setpoint", nil); err != nil || !strings.Contains(resultText(res), `"value":40`) {
		t.Fatalf("read_: %v %s", err, resultText(res))
	}
	if err := d.byHand(47); err != nil {
		t.Fatal(err)
	}
	res, err := callDo(t, c, "do_boiler_setpoint", map[string]any{"value": 55})
	if err != nil || res.IsError || !strings.Contains(resultText(res), `"previous_value":47`) {
		t.Fatalf("approved do_: %v %s", err, resultText(res))
	}
	if len(who.asked) != 1 || !strings.Contains(who.asked[0].Message, "Previous value: 47 °C") {
		t.Errorf("form: %+v", who.asked)
	}
	if n := d.bus.writes.Load(); n != 1 {
		t.Errorf("%d writes, want 1", n)
	}
}

// A device that cannot be read for the form says so; the person approved
// knowing that, so the write goes ahead (from what the device then holds).
func TestApprovalFormUnreadable(t *testing.T) {
	d := startApprovalDevice(t)
	who := &person{answer: answering(mcp.ElicitationResponseActionAccept, true)}
	c := d.connect(t, nil, nil, client.WithElicitationHandler(who))
	d.bus.ModbusBus.(*sim.Modbus).FailNext(1, nil)
	res, err := callDo(t, c, "do_boiler_setpoint", map[string]any{"value": 55})
	if err != nil || res.IsError || !strings.Contains(resultText(res), `"previous_value":40`) {
		t.Fatalf("approved do_: %v %s", err, resultText(res))
	}
	if len(who.asked) != 1 || !strings.Contains(who.asked[0].Message, "Previous value: could not be read (") {
		t.Errorf("form: %+v", who.asked)
	}
	if n := d.bus.writes.Load(); n != 1 {
		t.Errorf("%d writes, want 1", n)
	}
}

// The approval binds the device value the form showed. When the device moves
// between the form and the answer, the approved call writes nothing and the
// person is asked again with the value it holds now; their second answer
// decides. A change within the register's resolution is no move. Both on the
// current protocol and on 2025-06-18 (server-initiated elicitation).
func TestApprovalRefusedWhenValueMoved(t *testing.T) {
	cases := map[string]struct {
		moveTo float64
		second mcp.ElicitationResponseAction // the answer to the form shown again
		forms  int
		writes int64
	}{
		"moved, asked again, declined":  {moveTo: 47, second: mcp.ElicitationResponseActionDecline, forms: 2, writes: 0},
		"moved, asked again, approved":  {moveTo: 47, second: mcp.ElicitationResponseActionAccept, forms: 2, writes: 1},
		"within the float32 resolution": {moveTo: 40.00001, forms: 1, writes: 1},
	}
	for _, version := range []string{"", "2025-06-18"} {
		for name, tc := range cases {
			t.Run(name+" protocol "+version, func(t *testing.T) {
				d := startApprovalDevice(t)
				who := &person{}
				who.answer = func(p mcp.ElicitationParams) *mcp.ElicitationResult {
					if len(who.asked) == 1 {
						// The person reads the form; meanwhile the device changes.
						if err := d.byHand(tc.moveTo); err != nil {
							t.Error(err)
						}
						return answering(mcp.ElicitationResponseActionAccept, true)(p)
					}
					return answering(tc.second, tc.second == mcp.ElicitationResponseActionAccept)(p)
				}
				opts := []client.ClientOption{client.WithElicitationHandler(who)}
				if version != "" {
					opts = append(opts, client.WithProtocolVersion(version))
				}
				c := d.connect(t, nil, nil, opts...)
				res, err := callDo(t, c, "do_boiler_setpoint", map[string]any{"value": 55})
				if err != nil {
					t.Fatal(err)
				}
				if len(who.asked) != tc.forms {
					t.Fatalf("%d forms, want %d", len(who.asked), tc.forms)
				}
				if !strings.Contains(who.asked[0].Message, "Previous value: 40 °C") {
					t.Errorf("first form:\n%s", who.asked[0].Message)
				}
				if tc.forms == 2 {
					again := who.asked[1].Message
					for _, want := range []string{"the device value moved from 40 °C to 47 °C since the approval was shown; nothing was written", "Previous value: 47 °C"} {
						if !strings.Contains(again, want) {
							t.Errorf("second form lacks %q:\n%s", want, again)
						}
					}
				}
				if n := d.bus.writes.Load(); n != tc.writes {
					t.Errorf("%d writes, want %d", n, tc.writes)
				}
				if failed := tc.writes == 0; res.IsError != failed {
					t.Errorf("IsError %v: %s", res.IsError, resultText(res))
				}
				if tc.writes == 0 && !strings.Contains(resultText(res), "requires_human_approval") {
					t.Errorf("refusal: %s", resultText(res))
				}
			})
		}
	}
}
