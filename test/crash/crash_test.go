// Package crash tests exactly-once writes, persisted cooldowns, the audit
// trail and the safe state against the real physmcpd binary: it is started as
// a subprocess on a simulated Modbus device whose simulator logs every applied
// write to disk (simulation.write_log, fsync'd per write, and restored on the
// next start as a real device would keep its registers), killed with SIGKILL
// at random moments during do_* calls, restarted, and asked again with the
// same idempotency keys. Every fourth call it is started with
// PHYSMCPD_TEST_KILL_BEFORE_AUDIT=1 instead, so it kills itself after the
// store recorded the write and before its audit line (a window too short
// for random kills to hit): the restart must recover the line from the
// store. After every restart the trail verifies and accounts for the write.
package crash

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/audit"
)

const manifestTmpl = `physmcp_version: "0.1"
device: {id: crash_rig_01, type: test_rig}
buses:
  plc:
    type: modbus-tcp
    address: 127.0.0.1:1502
    simulated: true
    simulation: {latency_ms: 2, jitter_ms: 2, seed: 7, write_log: %q}
capabilities:
  - name: flow_setpoint
    kind: do
    description: Flow setpoint; every call writes a new value.
    binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}
    data_type: int
    range: {min: 0, max: 60000}
    safe_value: 0
    semantic_tags: [flow, setpoint]
  - name: heater_power
    kind: do
    description: Heater power, protected by a long cooldown.
    binding: {bus: plc, unit: 1, table: holding, address: 1, data_type: uint16}
    data_type: int
    range: {min: 0, max: 100}
    cooldown_ms: 600000
    semantic_tags: [heater, power]
audit: {enabled: true, retention_days: 30}
`

const policyText = `physmcp_policy_version: "0.1"
identity:
  local_role: operator
`

// binary is physmcpd built once for the package's tests (buildErr when that failed).
var binary, buildErr = "", error(nil)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "physmcpd-crash-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "physmcpd")
	if out, err := exec.Command("go", "build", "-o", binary, "../../cmd/physmcpd").CombinedOutput(); err != nil {
		buildErr = fmt.Errorf("go build ../../cmd/physmcpd: %v\n%s", err, out)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// rig is the built binary, its files and the running daemon.
type rig struct {
	t                               *testing.T
	bin, dir, stateDir, writeLog    string
	manifest, policy, stderrLogPath string
	stderrLog                       *os.File

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	msgs   chan map[string]any
	exited chan struct{}
	nextID int
}

func newRig(t *testing.T) *rig {
	t.Helper()
	dir := t.TempDir()
	r := &rig{t: t, dir: dir, bin: binary, stateDir: filepath.Join(dir, "state"),
		writeLog: filepath.Join(dir, "writes.jsonl"), manifest: filepath.Join(dir, "m.yml"), policy: filepath.Join(dir, "p.yml"),
		stderrLogPath: filepath.Join(dir, "stderr.log")}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	must(t, os.WriteFile(r.manifest, fmt.Appendf(nil, manifestTmpl, r.writeLog), 0o600))
	must(t, os.WriteFile(r.policy, []byte(policyText), 0o600))
	f, err := os.Create(r.stderrLogPath)
	must(t, err)
	r.stderrLog = f
	t.Cleanup(func() {
		r.kill()
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(r.stderrLogPath)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("daemon stderr (tail):\n%s", b)
		}
	})
	return r
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// start runs the daemon and completes the MCP handshake.
func (r *rig) start() { r.startWith(nil) }

// startWith starts the daemon with env added to its environment.
func (r *rig) startWith(env []string) {
	r.t.Helper()
	cmd := exec.Command(r.bin, "serve", "--manifest", r.manifest, "--policy", r.policy, "--simulate", "--stdio", "--state-dir", r.stateDir)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = r.stderrLog
	stdin, err := cmd.StdinPipe()
	must(r.t, err)
	stdout, err := cmd.StdoutPipe()
	must(r.t, err)
	must(r.t, cmd.Start())
	r.cmd, r.stdin, r.msgs, r.exited = cmd, stdin, make(chan map[string]any, 16), make(chan struct{})
	go func(msgs chan<- map[string]any, exited chan<- struct{}) {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				msgs <- m
			}
		}
		cmd.Wait()
		close(exited)
	}(r.msgs, r.exited)
	r.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "crash-test", "version": "0"}})
	r.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
}

func (r *rig) send(msg map[string]any) {
	r.t.Helper()
	b, _ := json.Marshal(msg)
	if _, err := r.stdin.Write(append(b, '\n')); err != nil {
		r.t.Fatalf("write to the daemon: %v", err)
	}
}

// request sends a request and returns its id without waiting.
func (r *rig) request(method string, params any) int {
	r.nextID++
	r.send(map[string]any{"jsonrpc": "2.0", "id": r.nextID, "method": method, "params": params})
	return r.nextID
}

// await returns the response to id, or nil if the daemon exited first.
func (r *rig) await(id int) map[string]any {
	r.t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m := <-r.msgs:
			if n, ok := m["id"].(float64); ok && int(n) == id {
				if e, ok := m["error"]; ok {
					r.t.Fatalf("request %d failed: %v", id, e)
				}
				return m["result"].(map[string]any)
			}
		case <-r.exited:
			return nil
		case <-timeout:
			r.t.Fatalf("no answer to request %d", id)
		}
	}
}

func (r *rig) call(method string, params any) map[string]any {
	r.t.Helper()
	res := r.await(r.request(method, params))
	if res == nil {
		r.t.Fatalf("%s: the daemon exited", method)
	}
	return res
}

func doArgs(tool string, value int, key string) map[string]any {
	return map[string]any{"name": tool, "arguments": map[string]any{"value": value, "idempotency_key": key}}
}

// doResult decodes a do_* answer (structuredContent).
func doResult(t *testing.T, res map[string]any) map[string]any {
	t.Helper()
	sc, ok := res["structuredContent"].(map[string]any)
	if !ok {
		t.Fatalf("no structuredContent in %v", res)
	}
	return sc
}

func (r *rig) do(tool string, value int, key string) map[string]any {
	r.t.Helper()
	return doResult(r.t, r.call("tools/call", doArgs(tool, value, key)))
}

// kill sends SIGKILL and waits for the process to be gone.
func (r *rig) kill() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
	r.cmd = nil
}

// writes reads the simulator's write log: the values written to capability, in order.
func (r *rig) writes(capability string) []int {
	r.t.Helper()
	b, err := os.ReadFile(r.writeLog)
	must(r.t, err)
	var out []int
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var l struct {
			Capability string  `json:"capability"`
			Value      float64 `json:"value"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			r.t.Fatalf("write log line %q: %v", line, err)
		}
		if l.Capability == capability {
			out = append(out, int(l.Value))
		}
	}
	return out
}

// killBeforeAudit makes the daemon kill itself between its first applied
// write's stored outcome and its audit line (cmd/physmcpd/auditrecover.go).
var killBeforeAudit = []string{"PHYSMCPD_TEST_KILL_BEFORE_AUDIT=1"}

// hooked says whether call i is killed by killBeforeAudit rather than at random.
func hooked(i int) bool { return i%4 == 0 }

// trailOutcomes reads the audit trail: the outcomes of each idempotency key's lines.
func (r *rig) trailOutcomes() map[string][]string {
	r.t.Helper()
	files, err := filepath.Glob(filepath.Join(r.stateDir, "audit", "audit-*.jsonl"))
	must(r.t, err)
	out := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		must(r.t, err)
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var l struct {
				Key     string `json:"idempotency_key"`
				Outcome string `json:"outcome"`
			}
			if err := json.Unmarshal(line, &l); err != nil {
				r.t.Fatalf("audit line %q: %v", line, err)
			}
			if l.Key != "" {
				out[l.Key] = append(out[l.Key], l.Outcome)
			}
		}
	}
	return out
}

// wroteIt says whether outcomes include one that reports the write itself.
func wroteIt(outcomes []string) bool {
	for _, o := range outcomes {
		switch o {
		case "applied", "confirmed", "recovered":
			return true
		}
	}
	return false
}

// verifyTrail checks the trail with its key as `physmcpd audit verify` does,
// in process to keep the test fast (the daemon is idle: every answer was sent
// after its line was on disk). The command itself runs at the end.
func (r *rig) verifyTrail(when string) {
	r.t.Helper()
	key, err := audit.LoadKey(filepath.Join(r.stateDir, "audit.key"))
	must(r.t, err)
	if _, err := audit.Verify(filepath.Join(r.stateDir, "audit"), audit.WithKey(key)); err != nil {
		r.t.Fatalf("audit verify %s: %v", when, err)
	}
}

func iterations() int {
	if n, err := strconv.Atoi(os.Getenv("PHYSMCPD_CRASH_ITERATIONS")); err == nil && n > 0 {
		return n
	}
	if testing.Short() {
		return 20
	}
	return 200
}

func TestCrashExactlyOnce(t *testing.T) {
	r := newRig(t)
	// The device was left at a non-safe value before physmcpd ever ran.
	must(t, os.WriteFile(r.writeLog, []byte(`{"time":"2026-01-01T00:00:00Z","bus":"plc","capability":"flow_setpoint","value":777}`+"\n"), 0o600))
	began := time.Now()
	r.start()
	if w := r.writes("flow_setpoint"); len(w) != 2 || w[1] != 0 {
		t.Fatalf("safe state at start-up: flow_setpoint writes %v, want 777 then the safe value 0", w)
	}

	// Time one undisturbed call, so kills land anywhere inside a call.
	callStart := time.Now()
	if res := r.do("do_flow_setpoint", 60000, "warm-up"); res["status"] != "success" {
		t.Fatalf("warm-up call: %v", res)
	}
	callTime := time.Since(callStart)

	n := iterations()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	var answeredBeforeKill, landedBeforeKill, replayed, kills, killedBeforeAudit, recovered, superseded int
	superseding := map[int]bool{}
	for i := 1; i <= n; i++ {
		key := fmt.Sprintf("key-%d", i)
		if hooked(i) {
			r.kill() // idle: nothing is lost
			r.startWith(killBeforeAudit)
		}
		id := r.request("tools/call", doArgs("do_flow_setpoint", i, key))
		if hooked(i) {
			if r.await(id) != nil {
				t.Fatalf("iteration %d: answered although started with %s", i, killBeforeAudit[0])
			}
			killedBeforeAudit++
		} else {
			time.Sleep(time.Duration(rng.Int63n(int64(callTime))))
		}
		r.kill()
		kills++
		// the first answer may have made it out before the kill
		for drained := false; !drained; {
			select {
			case m := <-r.msgs:
				if n, ok := m["id"].(float64); ok && int(n) == id {
					answeredBeforeKill++
				}
			default:
				drained = true
			}
		}
		if w := r.writes("flow_setpoint"); len(w) > 0 && w[len(w)-1] == i {
			landedBeforeKill++
		}
		r.start()
		res := r.do("do_flow_setpoint", i, key)
		if res["permission"] == "physmcp:superseded" && !hooked(i) {
			// the write never left before the kill, and the start-up safe
			// state has written since: writing it now would undo that
			superseding[i] = true
			superseded++
		} else if res["status"] != "success" || res["applied_value"] != float64(i) {
			t.Fatalf("iteration %d: retry after the kill answered %v", i, res)
		}
		if again := r.do("do_flow_setpoint", i, key); again["applied_value"] != res["applied_value"] || again["permission"] != res["permission"] ||
			(!superseding[i] && again["timestamp"] != res["timestamp"]) {
			t.Fatalf("iteration %d: a second retry did not give the same answer: %v vs %v", i, again, res)
		} else {
			replayed++
		}
		r.verifyTrail(fmt.Sprintf("after iteration %d", i))
		outcomes := r.trailOutcomes()[key]
		if slices.Contains(outcomes, "recovered") {
			recovered++
		}
		if hooked(i) && !slices.Contains(outcomes, "recovered") {
			t.Fatalf("iteration %d: killed before the audit line, the trail has %v for %s, want a recovered line", i, outcomes, key)
		}
		if slices.Contains(r.writes("flow_setpoint"), i) && !wroteIt(outcomes) {
			t.Fatalf("iteration %d: %d was written to the device, but the audit trail has only %v for %s", i, i, outcomes, key)
		}
	}

	counts := map[int]int{}
	for _, v := range r.writes("flow_setpoint") {
		counts[v]++
	}
	exactlyOnce := 0
	for i := 1; i <= n; i++ {
		want := 1
		if superseding[i] {
			want = 0
		}
		if counts[i] != want {
			t.Errorf("key-%d: %d writes of %d, want %d", i, counts[i], i, want)
		} else if want == 1 {
			exactlyOnce++
		}
	}
	t.Logf("crash test: %d iterations, %d SIGKILLs (%d after the write reached the device, %d after the answer was sent, "+
		"%d by the daemon itself between the stored outcome and the audit line), %d writes recovered into the audit trail, "+
		"%d keys written exactly once, %d superseded by the start-up safe state (never written), %d safe-state writes, %d replays checked, "+
		"the trail verified after every restart, %.1f s (one undisturbed do_* call: %s)",
		n, kills, landedBeforeKill, answeredBeforeKill, killedBeforeAudit, recovered, exactlyOnce, superseded,
		counts[0], replayed, time.Since(began).Seconds(), callTime.Round(time.Millisecond))

	// A cooldown set before a kill still blocks after the restart.
	if res := r.do("do_heater_power", 40, "heat-1"); res["status"] != "success" {
		t.Fatalf("heater: %v", res)
	}
	r.kill()
	r.start()
	if res := r.do("do_heater_power", 60, "heat-2"); res["permission"] != "cooldown_active" {
		t.Fatalf("heater after a SIGKILL and restart inside its cooldown: %v, want cooldown_active", res)
	}
	if h := r.writes("heater_power"); len(h) != 1 || h[0] != 40 {
		t.Fatalf("heater writes %v, want [40]", h)
	}

	// SIGTERM drives the actuator to its safe value before exit.
	if res := r.do("do_flow_setpoint", 4321, "before-term"); res["status"] != "success" {
		t.Fatalf("before SIGTERM: %v", res)
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	<-r.exited
	if code := r.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
	r.cmd = nil
	if w := r.writes("flow_setpoint"); w[len(w)-1] != 0 {
		t.Fatalf("flow_setpoint after SIGTERM = %d, want the safe value 0", w[len(w)-1])
	}

	// The audit trail survived every kill with its chain intact.
	out, code := r.run("audit", "verify", "--state-dir", r.stateDir)
	if code != 0 {
		t.Fatalf("audit verify after the run: exit %d\n%s", code, out)
	}
	t.Logf("audit verify: %s", strings.TrimSpace(out))
}

// run runs the binary to completion and returns its combined output and exit code.
func (r *rig) run(args ...string) (string, int) {
	r.t.Helper()
	out, err := exec.Command(r.bin, args...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	r.t.Fatalf("%v: %v", args, err)
	return "", 0
}

func TestAuditVerifyDetectsTampering(t *testing.T) {
	r := newRig(t)
	r.start()
	for i := 1; i <= 5; i++ {
		r.do("do_flow_setpoint", i, fmt.Sprintf("k%d", i))
	}
	r.do("do_flow_setpoint", 99999, "refused") // out of range: refusals are audited too
	r.stdin.Close()                            // the client leaves: a clean exit
	<-r.exited
	r.cmd = nil
	if out, code := r.run("audit", "verify", "--state-dir", r.stateDir); code != 0 {
		t.Fatalf("untouched trail: exit %d\n%s", code, out)
	}
	files, _ := filepath.Glob(filepath.Join(r.stateDir, "audit", "audit-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("audit files %v", files)
	}
	orig, err := os.ReadFile(files[0])
	must(t, err)
	lines := bytes.SplitAfter(orig, []byte("\n"))
	// the keyed event, start-up safe state, 5 applied, 1 refused, shutdown safe state
	if len(lines) != 10 || !bytes.Contains(lines[0], []byte(`"event":"keyed"`)) || !bytes.Contains(lines[7], []byte(`"permission":"out_of_range"`)) ||
		!bytes.Contains(lines[1], []byte(`"outcome":"safe_state"`)) {
		t.Fatalf("trail:\n%s", orig)
	}

	edited := bytes.Clone(orig)
	edited = bytes.Replace(edited, []byte(`"applied_value":3`), []byte(`"applied_value":4`), 1)
	must(t, os.WriteFile(files[0], edited, 0o600))
	out, code := r.run("audit", "verify", "--state-dir", r.stateDir)
	if want := filepath.Base(files[0]) + ":6:"; code != 1 || !strings.Contains(out, want) {
		t.Fatalf("edited line 5: exit %d, output %q, want exit 1 naming %s", code, out, want)
	}

	deleted := bytes.Join(append(append([][]byte{}, lines[:3]...), lines[4:]...), nil)
	must(t, os.WriteFile(files[0], deleted, 0o600))
	out, code = r.run("audit", "verify", "--state-dir", r.stateDir)
	if want := filepath.Base(files[0]) + ":4:"; code != 1 || !strings.Contains(out, want) {
		t.Fatalf("deleted line 4: exit %d, output %q, want exit 1 naming %s", code, out, want)
	}
}
