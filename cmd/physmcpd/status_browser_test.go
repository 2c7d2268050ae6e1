//go:build !lite

package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/physmcp/physmcpd/internal/testenv"
	"github.com/physmcp/physmcpd/mcpserver"
)

// chromium is Debian's browser, which .ci/setup.d/80-chromium.sh installs.
const chromium = "/usr/bin/chromium"

// TestStatusPageInChromium opens the status page of the simulated example in
// headless Chromium as a technician would: the page asks for the token, then
// shows a refused call in the audit tail, the cooldown of do_heater_setpoint
// clearing, and the setpoint an agent writes, all without a reload.
func TestStatusPageInChromium(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		testenv.Missing(t, "%s is missing (apt-get install chromium; .ci/setup.d/80-chromium.sh): %v", chromium, err)
	}
	url, _, log, _ := serveInBackground(t, []string{"--manifest", serveExampleManifest, "--policy", serveExamplePolicy,
		"--simulate", "--state-dir", t.TempDir(), "--http", "127.0.0.1:0"})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve's log:\n%s", log.String())
		}
	})
	base := strings.TrimSuffix(url, mcpserver.EndpointPath)
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + operatorToken}))
	if err != nil {
		t.Fatal(err)
	}
	agent := dialMCP(t, tr)
	// The safe state wrote do_heater_setpoint at start-up, so its 10 s
	// cooldown refuses an agent's call now.
	if body := answer(t, agent, "do_heater_setpoint", map[string]any{"value": 25}); body["permission"] != "cooldown_active" {
		t.Fatalf("do_heater_setpoint right after start-up: %v", body)
	}

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox)...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	// The first Run starts the browser, which lives as long as its context.
	if err := chromedp.Do(browser, chromedp.Navigate(base+mcpserver.StatusPath)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(browser, 90*time.Second)
	defer cancel()
	// until waits for a JavaScript condition on the page.
	until := func(what, condition string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](condition, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("%s: %v; the page shows:\n%s", what, err, text)
		}
	}
	cellOf := func(tool, class string) string {
		return `(document.querySelector('tr[data-tool="` + tool + `"] td.` + class + `') || {}).textContent`
	}

	// Without a token the API answers 401 and the page asks for one.
	until("the token form", `!document.getElementById('login').hidden`)
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("token"), operatorToken),
		chromedp.Click(chromedp.CSS("#login button")),
	); err != nil {
		t.Fatal(err)
	}
	until("the status after the token", `!document.getElementById('status').hidden`)
	// Marks this document: a reload would lose it.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.notReloaded = true`)); err != nil {
		t.Fatal(err)
	}
	until("the setpoint the safe state wrote", cellOf("read_heater_setpoint", "value")+` === '12 °C'`)
	until("the refusal in the audit tail", `[...document.querySelectorAll('#audit tr[data-tool="do_heater_setpoint"]')]
		.some(r => r.querySelector('td.outcome').textContent === 'refused (cooldown_active)' && r.textContent.includes('= 25'))`)

	// The cooldown clears by itself and the page says so; then an agent
	// writes, and the page shows the new value and the new cooldown.
	until("the cooldown clearing", cellOf("do_heater_setpoint", "state")+` === 'ready'`)
	if body := answer(t, agent, "do_heater_setpoint", map[string]any{"value": 22}); body["status"] != "success" {
		t.Fatalf("do_heater_setpoint after the cooldown: %v", body)
	}
	until("the new setpoint", cellOf("read_heater_setpoint", "value")+` === '22 °C'`)
	until("the new cooldown", cellOf("do_heater_setpoint", "state")+`.startsWith('cooldown_active') && `+cellOf("do_heater_setpoint", "clears")+`.startsWith('in ')`)
	until("the write in the audit tail", `[...document.querySelectorAll('#audit tr[data-tool="do_heater_setpoint"]')]
		.some(r => r.querySelector('td.outcome').textContent === 'applied' && r.textContent.includes('= 22'))`)

	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.notReloaded === true ? location.href : 'reloaded'`))
	if err != nil {
		t.Fatal(err)
	}
	if href != base+mcpserver.StatusPath {
		t.Errorf("the page was reloaded or its address changed: %s", href)
	}
	if strings.Contains(log.String(), operatorToken) {
		t.Error("the token appears in serve's log")
	}
}
