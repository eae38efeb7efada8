package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestOutcome(t *testing.T) {
	t.Parallel()
	answer := func(code int, body string, hdr ...string) *upstream.APIResponse {
		h := http.Header{}
		for i := 0; i+1 < len(hdr); i += 2 {
			h.Set(hdr[i], hdr[i+1])
		}
		return &upstream.APIResponse{Status: code, Body: []byte(body), Header: h}
	}
	for _, tc := range []struct {
		name     string
		resp     *upstream.APIResponse
		err      error
		post     bool
		code     int
		ok       bool
		body     string // "" = any
		desc     string // substring
		upstream int
	}{
		{name: "200 verbatim", resp: answer(200, ` {"ids" : []} `), code: 200, ok: true, body: ` {"ids" : []} `, upstream: 200},
		{name: "201", resp: answer(201, `{"id":"BO-1"}`), code: 201, ok: true, upstream: 201},
		{name: "204 empty", resp: answer(204, ``), code: 204, ok: true, upstream: 204},
		{name: "200 not JSON", resp: answer(200, `<html>`), code: 502, desc: "not JSON", upstream: 200},
		{name: "302", resp: answer(302, ``), code: 502, desc: "unexpected HTTP 302", upstream: 302},
		{name: "404 own body", resp: answer(404, `{"messages":["Order x not found"]}`), code: 404,
			body: `{"messages":["Order x not found"]}`, desc: "Order x not found", upstream: 404},
		{name: "409 empty messages", resp: answer(409, `{"messages":[]}`), code: 409, desc: "HTTP 409 Conflict", upstream: 409},
		{name: "500 html", resp: answer(500, `<html>oops</html>`), code: 500, desc: "not an ApiResponseMessage", upstream: 500},
		{name: "multi-line message", resp: answer(400, `{"messages":["a\r\nb","c"]}`), code: 400, desc: "a  b; c", upstream: 400},
		{name: "deadline", err: fmt.Errorf("Get x: %w", context.DeadlineExceeded), code: 504, desc: "did not answer within 2s"},
		{name: "deadline POST", err: context.DeadlineExceeded, post: true, code: 504, desc: "was not repeated"},
		{name: "net timeout", err: &url.Error{Op: "Get", URL: "x", Err: timeoutErr{}}, code: 504},
		{name: "token wait timeout", err: fmt.Errorf("%w: %w", upstream.ErrNoToken, context.DeadlineExceeded), code: 504, desc: "no access token"},
		{name: "no token", err: fmt.Errorf("%w: %w", upstream.ErrNoToken, upstream.ErrLoginRejected), code: 503, desc: "no access token"},
		{name: "cancelled", err: context.Canceled, code: 503, desc: "shutting down"},
		{name: "refused", err: errors.New("dial tcp: connection refused"), code: 503, desc: "cannot be reached"},
		{name: "cut", resp: answer(200, `{"a":`), err: fmt.Errorf("%w: unexpected EOF", upstream.ErrAnswerCut), code: 502, upstream: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := outcome(tc.resp, tc.err, 2*time.Second, tc.post)
			if r.code != tc.code || r.ok != tc.ok || r.upstream != tc.upstream || !strings.Contains(r.desc, tc.desc) {
				t.Fatalf("got %+v", r)
			}
			if tc.body != "" && string(r.body) != tc.body {
				t.Errorf("body %q, want %q", r.body, tc.body)
			}
			m := r.message("reply")
			if !tc.ok {
				var am apiMessage
				if !isAPIMessage(r.body, &am) {
					t.Errorf("failure body %q", r.body)
				}
				if m.Header.Get(micro.ErrorCodeHeader) != fmt.Sprint(tc.code) || m.Header.Get(micro.ErrorHeader) == "" ||
					strings.ContainsAny(m.Header.Get(micro.ErrorHeader), "\r\n") {
					t.Errorf("headers %v", m.Header)
				}
			} else if m.Header.Get(micro.ErrorCodeHeader) != "" {
				t.Errorf("success with error headers %v", m.Header)
			}
		})
	}
}

func TestSemver(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"1.2.3": "1.2.3", "v1.2.3": "1.2.3", "1.2.3-rc.1+abc": "1.2.3-rc.1+abc",
		"dev": "0.0.0-dev", "": "0.0.0-v", "2026.11.25 build/7": "0.0.0-v2026-11-25-build-7",
	} {
		if got := semver(in); got != want || !semverRE.MatchString(got) {
			t.Errorf("semver(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzBuild: no request body makes an endpoint panic, and an accepted one gives a request for the
// operation's method on a path under its documented one.
func FuzzBuild(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"id":"BO-1"}`, `{"id":"a/../b","order":{}}`, `{"page":1e3,"pageSize":-0}`,
		`{"orderId":"o","positionId":"p"}`, `[]`, `{"id":"\u0000"}`, `{"event":{"timestamp":"2024-01-01T00:00:00Z","type":"X"}}`,
		`{"unit":"msku 123456-7","limit":5}`, `{"unit":"--"}`} {
		f.Add(s)
	}
	b := builder{reportPath: "/tracking/events", validator: defaultValidator()}
	f.Fuzz(func(t *testing.T, body string) {
		for _, op := range Operations {
			if op.FromNATS() {
				q, problems := op.query(&checker{}, []byte(body))
				if len(problems) == 0 && (q.token != layout.UnitToken(q.number) || q.token == layout.NoUnit ||
					q.limit < 1 || q.limit > MaxUnitEvents) {
					t.Fatalf("%s accepted %q as unit %q, limit %d", op.Name, body, q.token, q.limit)
				}
				continue
			}
			req, problems := op.build(b, []byte(body))
			if len(problems) > 0 {
				continue
			}
			prefix, _, _ := strings.Cut(op.Path, "{")
			if req.Method != op.Method || !strings.HasPrefix(req.Path, prefix) {
				t.Fatalf("%s accepted %q as %s %s", op.Name, body, req.Method, req.Path)
			}
			u, err := url.Parse("http://h" + req.Path)
			if err != nil || slices.ContainsFunc(strings.Split(u.EscapedPath(), "/"), func(seg string) bool { return seg == ".." || seg == "." }) {
				t.Fatalf("%s: path %q from %q", op.Name, req.Path, body)
			}
		}
	})
}

// TestLastErrorIsTheKind: the last error discovery shows is a failure's code and kind, with the
// upstream's status when it answered, never its description (which quotes the caller and the upstream),
// for every kind, those only a stop brings included.
func TestLastErrorIsTheKind(t *testing.T) {
	t.Parallel()
	const marker = "zMARKq"
	seen := map[kind]bool{}
	for _, k := range kinds {
		if seen[k] || k == "" || strings.ContainsAny(string(k), ":\r\n") {
			t.Errorf("kind %q: empty, repeated or not one line", k)
		}
		seen[k] = true
		for _, up := range []int{0, 404} {
			ep := &endpoint{}
			r := failure(503, k, "the request "+marker+" failed")
			r.upstream = up
			ep.failed(r)
			got := ep.stats().LastError
			want := "503:" + string(k)
			switch {
			case k == kindUpstream:
				want = fmt.Sprintf("503:%s HTTP %d", k, up)
			case up != 0:
				want += " (upstream HTTP 404)"
			}
			if got != want || strings.Contains(got, marker) {
				t.Errorf("kind %q, upstream %d: last error %q, want %q", k, up, got, want)
			}
		}
	}
}
