package daemon

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// TestLongEventIDNotResumedNorQuoted: a hostile upstream sends one event whose id is 900 KB of printable
// characters (within BRIDGE_STREAM_MAX_EVENT_BYTES) and closes the connection; it refuses any
// reconnect whose Last-Event-ID exceeds 8 KiB with 431, as a front proxy would. The event is stored
// (its Nats-Msg-Id a digest), the bridge does not send the id back (it resumes after the last id it
// can send), so it is served again; and neither /status nor any log line carries the id whole.
// (Found by an outside review: the stream stalled at every reconnect until a restart.)
func TestLongEventIDNotResumedNorQuoted(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	longID := strings.Repeat("i", 900<<10)
	var conns, refused, served atomic.Int64
	target, _ := neturl.Parse(up.Srv.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/stream") {
			proxy.ServeHTTP(w, r)
			return
		}
		if len(r.Header.Get("Last-Event-ID")) > 8<<10 {
			refused.Add(1)
			w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
			return
		}
		n := conns.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		body := fmt.Sprintf("id: ok-%d\ndata: {\"type\":\"GATE_OUT\"}\n\n", n)
		if n == 1 {
			body = "id: " + longID + "\ndata: {\"type\":\"GATE_IN\"}\n\n"
		} else {
			served.Add(1)
		}
		_, _ = io.WriteString(w, body)
		w.(http.Flusher).Flush()
		if n == 1 {
			time.Sleep(200 * time.Millisecond)
			return // the upstream closes the connection after the long id
		}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)

	cfg := up.Config(ns.URL(), func(c *config.Config) {
		c.UpstreamURL = srv.URL + sim.DefaultBasePath
		c.TokenURL = srv.URL + sim.TokenPath
	})
	ob := opsStartBridge(t, cfg)
	testutil.EventuallyState(t, 20*time.Second, "the long-id event stored and the stream served again", func() (bool, string) {
		n := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS")
		return n >= 2 && served.Load() > 0, fmt.Sprintf("stored %d, served %d, refused %d", n, served.Load(), refused.Load())
	})
	if n := refused.Load(); n != 0 {
		t.Errorf("%d reconnects sent the 900 KB id as Last-Event-ID", n)
	}
	_, body := ob.get(t, "/status")
	if len(body) > 16<<10 {
		t.Errorf("/status of %d bytes: the upstream's id is not cut short there", len(body))
	}
	for l := range strings.Lines(ob.logs.String()) {
		if len(l) > 16<<10 {
			t.Errorf("a log line of %d bytes: %.200s", len(l), l)
		}
	}
}
