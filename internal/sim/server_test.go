package sim

import (
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestRouting(t *testing.T) {
	e := newEnv(t, Options{BasePath: "/api/v2/"})
	tok := e.login("demo")
	if e.api != e.ts.URL+"/api/v2" {
		t.Fatalf("base %q", e.api)
	}
	if r := e.do("GET", "/locations?pageSize=1", tok, nil); r.Status != 200 {
		t.Errorf("custom base path: %d", r.Status)
	}
	resp, err := http.Get(e.ts.URL + "/v1.0/locations")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(b), `"messages"`) {
		t.Errorf("unknown path: %d %s", resp.StatusCode, b)
	}
	for in, want := range map[string]string{"api": "/api", "/": "", "/v1.0/": "/v1.0"} {
		if got := New(Options{BasePath: in}).base; got != want {
			t.Errorf("BasePath %q serves under %q, want %q", in, got, want)
		}
	}
	r := e.do("PATCH", "/orders/x", tok, nil)
	if r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") == "" {
		t.Errorf("PATCH: %d Allow %q", r.Status, r.Header.Get("Allow"))
	}
	r.messages(t)
}

func TestBindFlags(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.BindFlags(fs)
	if o.Heartbeat != DefaultHeartbeat || o.Retention != DefaultRetention || o.Users["demo"] != "demo" {
		t.Errorf("defaults not applied: %+v", o)
	}
	err := fs.Parse([]string{"-users", "a:1, b:x:y", "-rate", "-1", "-limit", "5", "-size", "1000",
		"-access-ttl", "2s", "-drop-every", "3", "-drop-mid-event", "-error-rate", "0.5", "-stream-status", "403",
		"-report-429", "-retry-after", "3s", "-retry", "250ms", "-client-id", "c", "-book-after", "2m"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Users) != 2 || o.Users["a"] != "1" || o.Users["b"] != "x:y" || o.EventRate != -1 || o.EventLimit != 5 ||
		o.EventSize != 1000 || o.AccessTTL != 2*time.Second || o.Retry != 250*time.Millisecond || o.ClientID != "c" || o.BookAfter != 2*time.Minute {
		t.Errorf("options %+v", o)
	}
	f := o.Faults
	if f.DropEvery != 3 || !f.DropMidEvent || f.ErrorRate != 0.5 || f.StreamStatus != 403 || !f.Report429 || f.RetryAfter != 3*time.Second {
		t.Errorf("faults %+v", f)
	}
	if s := fs.Lookup("users").Value.String(); strings.Contains(s, "x:y") || !strings.Contains(s, "a:[redacted]") {
		t.Errorf("users flag shows %q", s)
	}
	if err := fs.Parse([]string{"-users", "nocolon"}); err == nil {
		t.Error("-users without a password accepted")
	}
}
