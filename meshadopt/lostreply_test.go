package meshadopt_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/meshadopt"
	"github.com/physmcp/physmcpd/promcp"
)

// The device applies the aggregator's write, and the connection is reset
// before its answer gets back: the aggregator says the outcome is unknown
// (never failed), and the caller's retries with the same key settle it
// without a second write at the device.
func TestLostReplyAfterTheDeviceAppliedActsOnce(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	keys := [][]byte{key}
	deviceURL, dev := deviceAs(t, "greenhouse", "", keys, make(chan string))
	target, err := url.Parse(deviceURL)
	if err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool
	pass := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Method != http.MethodPost || !bytes.Contains(body, []byte(`"do_vent_fan"`)) || !armed.CompareAndSwap(true, false) {
			pass.ServeHTTP(w, r)
			return
		}
		// the device gets the call and answers it in full; its answer is lost
		rec := httptest.NewRecorder()
		pass.ServeHTTP(rec, r)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.(*net.TCPConn).SetLinger(0) // a reset, not an orderly close
		conn.Close()
	}))
	t.Cleanup(front.Close)

	m, p := load(t, "../examples/site/mesh-aggregator")
	agg := simEngine(t, m, p)
	a, err := meshadopt.New(meshadopt.Config{Source: m.MeshSource(), Node: "site_mesh_aggregator_01", Keys: keys, Logger: quiet}, &members{peers: []mesh.Peer{{
		NodeID: "greenhouse_controller_01", DeviceID: "greenhouse_controller_01", Zone: "greenhouse_a", Profile: "full",
		Endpoint: front.URL + target.Path, CapsHash: "h", State: mesh.Alive, Since: time.Now()}}}, agg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a.Sync(ctx)
	op := engine.Caller{Identity: "op", Role: manifest.RoleOperator}
	armed.Store(true)
	req := promcp.DoRequest{Value: true, IdempotencyKey: "k-lost"}
	r, err := agg.Do(ctx, op, fan, req)
	if err != nil || r.Status != promcp.StatusFailed || r.Permission != promcp.SourceUnreachable || !strings.Contains(r.Reason, "outcome is unknown") {
		t.Fatalf("the write whose answer was lost: %+v %v; want source_unreachable, outcome unknown", r, err)
	}
	if armed.Load() {
		t.Fatal("the reply was not dropped")
	}
	for range 3 {
		r, err = agg.Do(ctx, op, fan, req)
	}
	if err != nil || r.Status != promcp.StatusSuccess || r.AppliedValue != true || r.IdempotencyKey != "k-lost" {
		t.Errorf("after 3 retries with the key: %+v %v; want success", r, err)
	}
	if n, replays := calls(dev, "do_vent_fan"); n-replays != 1 {
		t.Errorf("the device acted on %d of %d calls of do_vent_fan (%d replayed); want once", n-replays, n, replays)
	}
}
