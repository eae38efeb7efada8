package consume

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// rawHPUB publishes one message with a raw header block over a plain TCP connection, as a client that
// builds its own header block may.
func (e *env) rawHPUB(subject, hdr, body string) {
	e.tb.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.ns.URL(), "nats://"))
	if err != nil {
		e.tb.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT {\"headers\":true,\"verbose\":false}\r\nHPUB %s %d %d\r\n%s%s\r\nPING\r\n",
		subject, len(hdr), len(hdr)+len(body), hdr, body)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			e.tb.Fatalf("raw client: %v", err)
		}
		if strings.HasPrefix(line, "PONG") {
			return // the server has processed the HPUB
		}
		if strings.HasPrefix(line, "-ERR") {
			e.tb.Fatalf("raw client: %s", line)
		}
	}
}

// TestMalformedHeaderBlockDeadLettered: a report whose header block has a line without a colon arrives
// without headers (nats.go drops the block). It is dead-lettered, not sent, with a reason naming the
// problem and its stream sequence, and with the header lines that could be read. A report without headers
// published afterwards is still delivered.
func TestMalformedHeaderBlockDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	c := e.start(e.js, e.config())
	hdr := "NATS/1.0\r\nNats-Msg-Id: bad-1\r\nthis line has no colon\r\nX-Trace: abc\r\n\r\n"
	e.rawHPUB(e.layout.ReportsSubject(), hdr, string(report(1)))
	testutil.Eventually(t, 10*time.Second, "a dead letter", func() bool { return len(e.deadLetters()) == 1 })

	// A plain report without headers after it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.js.PublishMsg(ctx, &nats.Msg{Subject: e.layout.ReportsSubject(), Data: report(2)}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the plain report accepted", func() bool { return len(e.accepted()) == 1 })
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })

	dl := e.deadLetters()[0]
	reason := dl.Header.Get(layout.HeaderError)
	t.Logf("Bridge-Error: %s", reason)
	for _, want := range []string{"header block could not be decoded", "stream sequence 1", `"this line has no colon"`} {
		if !strings.Contains(reason, want) {
			t.Errorf("Bridge-Error %q does not say %q", reason, want)
		}
	}
	if got := dl.Header.Get(layout.HeaderOriginalPrefix + "Nats-Msg-Id"); got != "bad-1" {
		t.Errorf("Bridge-Original-Nats-Msg-Id = %q, want bad-1; headers %v", got, dl.Header)
	}
	if got := dl.Header.Get("X-Trace"); got != "abc" {
		t.Errorf("X-Trace = %q, want abc", got)
	}
	if got := dl.Header.Get(layout.HeaderReportSequence); got != "1" {
		t.Errorf("Bridge-Report-Sequence = %q, want 1", got)
	}
	if string(dl.Data) != string(report(1)) {
		t.Errorf("dead letter body %q, want the report", dl.Data)
	}
	if calls := e.rec.all(); len(calls) != 1 {
		t.Errorf("%d upstream calls, want 1 (the plain report only)", len(calls))
	}
	if st := c.Stats(); st.Invalid != 1 || st.Accepted != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestReadHeaderLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw, problem string
		want         nats.Header
	}{
		{"NATS/1.0\r\nA: 1\r\nbad\r\nB:2\r\n\r\n", `line 3 "bad" is not "Key: value"`, nats.Header{"A": {"1"}, "B": {"2"}}},
		{"NATS/1.0\r\n: x\r\nno\r\n\r\n", `line 2 ": x" is not "Key: value" (and 1 more)`, nats.Header{}},
		{"HTTP/1.1\r\nA: 1\r\n\r\n", `line 1 "HTTP/1.1" is not NATS/1.0`, nats.Header{"A": {"1"}}},
	}
	for _, tt := range tests {
		hdr, problem := readHeaderLines([]byte(tt.raw))
		if problem != tt.problem || fmt.Sprint(hdr) != fmt.Sprint(tt.want) {
			t.Errorf("readHeaderLines(%q) = %v, %q; want %v, %q", tt.raw, hdr, problem, tt.want, tt.problem)
		}
	}
}

// TestMsgIDWithEdgeSpaceNotForwarded: JetStream tells the ids "k" and "k " apart, but HTTP drops a value's
// edge spaces, so forwarding "k " as the Idempotency-Key would send the upstream "k" again and have the
// second report answered as a repeat of the first. That id goes with the report's own key instead, and
// both reports reach the upstream under keys of their own.
func TestMsgIDWithEdgeSpaceNotForwarded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.start(e.js, e.config())
	e.rawHPUB(e.layout.ReportsSubject(), "NATS/1.0\r\nNats-Msg-Id: k\r\n\r\n", string(report(1)))
	e.rawHPUB(e.layout.ReportsSubject(), "NATS/1.0\r\nNats-Msg-Id: k \r\n\r\n", string(report(2)))
	testutil.Eventually(t, 10*time.Second, "both reports sent", func() bool { return e.rec.count() == 2 })
	calls := e.rec.all()
	keys := map[string]string{}
	for _, c := range calls {
		keys[string(c.body)] = c.key
	}
	if got := keys[string(report(1))]; got != "k" {
		t.Errorf("the first report's key %q, want k", got)
	}
	if got := keys[string(report(2))]; got == "k" || !strings.HasPrefix(got, e.layout.Reports()+"-2-") {
		t.Errorf("the second report's key %q, want its own (%s-2-…)", got, e.layout.Reports())
	}
}
