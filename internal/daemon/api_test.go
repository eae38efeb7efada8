package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// TestAPIServiceWired: the daemon serves the API of contract §7 on P.api.* through its own token source,
// counts it in bridge_api_requests_total, and leaves it out with BRIDGE_API_ENABLED=false.
func TestAPIServiceWired(t *testing.T) {
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	ob := opsStartBridge(t, up.Env(ns.URL(), map[string]string{"BRIDGE_SUBJECT_PREFIX": "acme.tracking"}))
	ob.waitReady(t, 15*time.Second, http.StatusOK)
	nc := ns.Connect()

	var m *nats.Msg
	testutil.EventuallyState(t, 5*time.Second, "an answer on acme.tracking.api.orders.list", func() (bool, string) {
		var err error
		m, err = nc.Request("acme.tracking.api.orders.list", nil, time.Second)
		return err == nil, ""
	})
	if m.Header.Get(micro.ErrorCodeHeader) != "" || string(m.Data) != "{\"ids\":[]}\n" {
		t.Errorf("orders.list: %v %q", m.Header, m.Data)
	}
	m, err := nc.Request("acme.tracking.api.orders.get", []byte(`{"id":"BO-1"}`), 5*time.Second)
	if err != nil || m.Header.Get(micro.ErrorCodeHeader) != "404" {
		t.Errorf("orders.get of an unknown order: %v %v", m, err)
	}
	if n := ob.counter(t, "bridge_api_requests_total", map[string]string{"endpoint": "orders.list", "code": "200"}); n != 1 {
		t.Errorf("bridge_api_requests_total{orders.list,200} = %v", n)
	}
	if n := ob.counter(t, "bridge_api_requests_total", map[string]string{"endpoint": "orders.get", "code": "404"}); n != 1 {
		t.Errorf("bridge_api_requests_total{orders.get,404} = %v", n)
	}
	info, err := nc.Request("$SRV.INFO.tracking-bridge", nil, 5*time.Second)
	if err != nil || !strings.Contains(string(info.Data), `"acme.tracking.api.tracking.report"`) {
		t.Errorf("$SRV.INFO: %v %v", info, err)
	}
	if err := ob.stop(t); err != nil {
		t.Fatal(err)
	}

	off := opsStartBridge(t, up.Env(ns.URL(), map[string]string{"BRIDGE_API_ENABLED": "false"}))
	off.waitReady(t, 15*time.Second, http.StatusOK)
	if _, err := nc.Request("tracking.api.orders.list", nil, 500*time.Millisecond); err == nil {
		t.Error("an answer with BRIDGE_API_ENABLED=false")
	}
}

// TestAPIServiceLeastPrivilege: with exactly the permissions of config/nats-users.conf, the
// bridge answers API and discovery requests without a permission violation.
func TestAPIServiceLeastPrivilege(t *testing.T) {
	ns := secPermissionedNATS(t)
	up := simtest.Start(t, false, sim.Options{})
	ob := opsStartBridge(t, up.Env(ns.URL(), secBridgeEnv))
	ob.waitReady(t, 15*time.Second, http.StatusOK)
	nc, err := nats.Connect(ns.URL(), nats.UserInfo("admin", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, subj := range []string{"tracking.api.orders.list", "$SRV.PING", "$SRV.INFO.tracking-bridge", "$SRV.STATS.tracking-bridge"} {
		var m *nats.Msg
		testutil.EventuallyState(t, 5*time.Second, "an answer on "+subj, func() (bool, string) {
			var err error
			m, err = nc.Request(subj, nil, time.Second)
			return err == nil, fmt.Sprint(err)
		})
		if m.Header.Get(micro.ErrorCodeHeader) != "" {
			t.Errorf("%s: %v", subj, m.Header)
		}
	}
	if err := ob.stop(t); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(ob.logs.String()), "permission") {
		t.Errorf("permission trouble in the bridge's log:\n%s", ob.logs)
	}
}
