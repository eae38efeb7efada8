package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// TestAPIServiceWired: the daemon serves the API of docs/api.md on P.api.* through its own token source,
// counts it in bridge_api_requests_total, has it in /readyz, and leaves it out with
// BRIDGE_API_ENABLED=false.
func TestAPIServiceWired(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	ob := opsStartBridge(t, up.Config(ns.URL(), func(c *config.Config) { c.SubjectPrefix = "acme.tracking" }))
	ob.waitReady(t, 15*time.Second, http.StatusOK, "api_service: ok")
	nc := ns.Connect()

	var m *nats.Msg
	attempts := 0 // a request that timed out here may still have been answered, and counted
	testutil.EventuallyState(t, 5*time.Second, "an answer on acme.tracking.api.orders.list", func() (bool, string) {
		var err error
		attempts++
		m, err = nc.Request("acme.tracking.api.orders.list", nil, time.Second)
		return err == nil, ""
	})
	if m.Header.Get(micro.ErrorCodeHeader) != "" || string(m.Data) != "{\"ids\":[]}\n" {
		t.Errorf("orders.list: %v %q", m.Header, m.Data)
	}
	m, err := nc.Request("acme.tracking.api.orders.get", []byte(`{"id":"BO-1"}`), testutil.Scale(5*time.Second))
	if err != nil || m.Header.Get(micro.ErrorCodeHeader) != "404" {
		t.Errorf("orders.get of an unknown order: %v %v", m, err)
	}
	if n := ob.counter(t, "bridge_api_requests_total", map[string]string{"endpoint": "orders.list", "code": "200"}); n < 1 || n > float64(attempts) {
		t.Errorf("bridge_api_requests_total{orders.list,200} = %v after %d requests, one answered in time", n, attempts)
	}
	if n := ob.counter(t, "bridge_api_requests_total", map[string]string{"endpoint": "orders.get", "code": "404"}); n != 1 {
		t.Errorf("bridge_api_requests_total{orders.get,404} = %v", n)
	}
	info, err := nc.Request("$SRV.INFO.tracking-bridge", nil, testutil.Scale(5*time.Second))
	if err != nil || !strings.Contains(string(info.Data), `"acme.tracking.api.tracking.report"`) {
		t.Errorf("$SRV.INFO: %v %v", info, err)
	}
	if err := ob.stop(t); err != nil {
		t.Fatal(err)
	}

	off := opsStartBridge(t, up.Config(ns.URL(), func(c *config.Config) { c.APIEnabled = false }))
	if body := off.waitReady(t, 15*time.Second, http.StatusOK); strings.Contains(body, "api_service") {
		t.Errorf("/readyz with BRIDGE_API_ENABLED=false:\n%s", body)
	}
	if _, err := nc.Request("tracking.api.orders.list", nil, 500*time.Millisecond); err == nil {
		t.Error("an answer with BRIDGE_API_ENABLED=false")
	}
}

// TestAPIServiceTrustWired: the daemon hands the service BRIDGE_API_ENDPOINTS, BRIDGE_API_REPLY_PREFIXES
// and BRIDGE_API_MAX_BODY_BYTES, counts dropped requests in bridge_api_requests_refused_total (every
// reason present from the start), and writes the audit line to its log.
func TestAPIServiceTrustWired(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	ob := opsStartBridge(t, up.Config(ns.URL(), func(c *config.Config) {
		c.APIEndpoints = "orders.list,orders.delete"
		c.APIReplyPrefixes = "_INBOX.,_INBOX_erp"
		c.APIMaxBodyBytes = 1024
	}))
	ob.waitReady(t, 15*time.Second, http.StatusOK)
	for _, reason := range []string{"no_reply", "reply_invalid"} {
		if n := ob.counter(t, "bridge_api_requests_refused_total", map[string]string{"reason": reason}); n != 0 {
			t.Errorf("bridge_api_requests_refused_total{%s} = %v, want 0", reason, n)
		}
	}
	nc := ns.Connect()
	testutil.EventuallyState(t, 5*time.Second, "an answer on tracking.api.orders.list", func() (bool, string) {
		_, err := nc.Request("tracking.api.orders.list", nil, time.Second)
		return err == nil, fmt.Sprint(err)
	})
	if _, err := nc.Request("tracking.api.orders.create", []byte(`{}`), time.Second); err != nats.ErrNoResponders {
		t.Errorf("orders.create, not served: %v, want no responders", err)
	}
	if err := nc.PublishRequest("tracking.api.orders.delete", "tracking.events.FORGED", []byte(`{"id":"BO-1"}`)); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyState(t, 5*time.Second, "the forged reply counted", func() (bool, string) {
		n := ob.counter(t, "bridge_api_requests_refused_total", map[string]string{"reason": "reply_not_inbox"})
		return n == 1, fmt.Sprint(n)
	})
	m, err := nc.Request("tracking.api.orders.list", []byte("{}"+strings.Repeat(" ", 1023)), testutil.Scale(5*time.Second))
	if err != nil || m.Header.Get(micro.ErrorCodeHeader) != "400" || !strings.Contains(m.Header.Get(micro.ErrorHeader), "more than the limit of 1024 bytes") {
		t.Errorf("a body past BRIDGE_API_MAX_BODY_BYTES: %v %v", m, err)
	}
	inbox := "_INBOX_erp." + strings.TrimPrefix(nats.NewInbox(), "_INBOX.")
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest("tracking.api.orders.delete", inbox, []byte(`{"id":"BO-1"}`)); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(testutil.Scale(5 * time.Second)); err != nil || m.Header.Get(micro.ErrorCodeHeader) != "404" {
		t.Errorf("delete of an unknown order from _INBOX_erp.: %v %v", m, err)
	}
	testutil.EventuallyState(t, 5*time.Second, "the audit line", func() (bool, string) {
		for line := range strings.Lines(ob.logs.String()) {
			if strings.Contains(line, `"msg":"API audit"`) {
				ok := strings.Contains(line, `"endpoint":"orders.delete"`) && strings.Contains(line, `"order_id":"BO-1"`) &&
					strings.Contains(line, `"status":404`) && strings.Contains(line, `"reply_prefix":"_INBOX_erp."`) &&
					strings.Contains(line, `"level":"INFO"`) && strings.Contains(line, `"component":"api"`)
				return ok, line
			}
		}
		return false, ""
	})
}

// TestAPIFloodSparesEventConnection: a burst of large requests to every API endpoint, faster than a
// client reads, may make the server cut the API service's connection as a slow consumer; the
// connection the events, the lease and the reports use is another, and stays up.
func TestAPIFloodSparesEventConnection(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	ob := opsStartBridge(t, up.Config(ns.URL()))
	ob.waitReady(t, 15*time.Second, http.StatusOK)
	body := []byte(`{"x":"` + strings.Repeat("x", 900_000) + `"}`)
	var flooders []*nats.Conn
	for range config.APIEndpointNames {
		flooders = append(flooders, ns.Connect())
	}
	done := make(chan struct{})
	for i, ep := range config.APIEndpointNames {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 60 {
				if err := flooders[i].PublishRequest("tracking.api."+ep, "_INBOX.flood", body); err != nil {
					return
				}
			}
			_ = flooders[i].Flush()
		}()
	}
	for range config.APIEndpointNames {
		<-done
	}
	nc := ns.Connect()
	testutil.EventuallyState(t, 30*time.Second, "the API answering after the flood", func() (bool, string) {
		_, err := nc.Request("tracking.api.orders.list", nil, 2*time.Second)
		return err == nil, fmt.Sprint(err)
	})
	if n := ob.b.natsSt.Reconnects(); n != 0 {
		t.Errorf("the event path's connection reconnected %d times during an API flood", n)
	}
	slow, cut := ns.Srv.NumSlowConsumers(), ob.b.apiNC.Stats().Reconnects
	t.Logf("server slow consumers: %d; API connection reconnects: %d", slow, cut)
	if slow == 0 && cut == 0 {
		t.Skip("the flood did not make the server cut the API connection here: nothing was tested")
	}
}
