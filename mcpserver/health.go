package mcpserver

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// HealthPath is the liveness endpoint: no token, no secrets, for a load
// balancer, a container runtime or a technician's curl.
const HealthPath = "/healthz"

// healthTimeout bounds one check: an engine that does not answer in time is
// not live.
const healthTimeout = 2 * time.Second

// Health answers HealthPath with 200 {"status":"ok"} while check passes and
// 503 {"status":"unhealthy"} when it fails; why goes to log, once per change
// (the check names buses and addresses, and the endpoint needs no token).
// Every other path goes to next.
func Health(check func(context.Context) error, log *slog.Logger, next http.Handler) http.Handler {
	var mu sync.Mutex
	last := "" // the latest failure logged; "" while healthy
	note := func(err error) {
		why := ""
		if err != nil {
			why = err.Error()
		}
		mu.Lock()
		defer mu.Unlock()
		if why == last {
			return
		}
		if last = why; err != nil {
			log.Warn(HealthPath+" answers unhealthy", "err", err)
		} else {
			log.Info(HealthPath + " answers healthy again")
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != HealthPath {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method_not_allowed"})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
		defer cancel()
		w.Header().Set("Cache-Control", "no-store")
		err := check(ctx)
		note(err)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unhealthy"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}
