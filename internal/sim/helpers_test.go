package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/launchdarkly/eventsource"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// env is a simulator served over loopback for one test.
type env struct {
	t    testing.TB
	sim  *Server
	ts   *httptest.Server
	api  string       // base URL of the API operations
	conf *conformance // checks every answer against the OpenAPI document
}

// newEnv starts a simulator with o (users demo:demo and other:other unless set); every answer of an API
// operation is checked against the OpenAPI document (conformance).
func newEnv(t testing.TB, o Options) *env {
	t.Helper()
	if o.Users == nil {
		o.Users = map[string]string{"demo": "demo", "other": "other"}
	}
	s := New(o)
	conf := newConformance(t, s)
	ts := httptest.NewServer(conf)
	t.Cleanup(ts.Close)
	t.Cleanup(s.Close) // runs first: ends streams so that ts.Close does not wait for them
	return &env{t: t, sim: s, ts: ts, api: ts.URL + s.base, conf: conf}
}

// tokenResult is a decoded token endpoint answer.
type tokenResult struct {
	Status int
	Body   map[string]any
}

// token posts form to the token endpoint.
func (e *env) token(form url.Values) tokenResult {
	e.t.Helper()
	resp, err := http.PostForm(e.ts.URL+TokenPath, form)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var r tokenResult
	r.Status = resp.StatusCode
	if err := json.NewDecoder(resp.Body).Decode(&r.Body); err != nil {
		e.t.Fatalf("token answer %d is not JSON: %v", resp.StatusCode, err)
	}
	return r
}

func passwordForm(user, pass string) url.Values {
	return url.Values{"grant_type": {"password"}, "username": {user}, "password": {pass},
		"client_id": {DefaultClientID}, "scope": {"openid"}}
}

// login returns an access token of user (password = user name).
func (e *env) login(user string) string {
	e.t.Helper()
	r := e.token(passwordForm(user, user))
	if r.Status != http.StatusOK {
		e.t.Fatalf("login %s: %d %v", user, r.Status, r.Body)
	}
	return r.Body["access_token"].(string)
}

// result is an API answer.
type result struct {
	Status int
	Header http.Header
	Body   []byte
}

// messages decodes an ApiResponseMessage body.
func (r result) messages(t *testing.T) []string {
	t.Helper()
	var m struct {
		Messages []string `json:"messages"`
	}
	if err := json.Unmarshal(r.Body, &m); err != nil || m.Messages == nil {
		t.Fatalf("body is not an ApiResponseMessage: %q (%v)", r.Body, err)
	}
	return m.Messages
}

// do calls the API; body (when not nil) is sent as application/json unless header says otherwise.
func (e *env) do(method, path, token string, body any, header ...string) result {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.api+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return result{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// openStream connects to the event stream; lastID "" sends no Last-Event-ID.
func (e *env) openStream(token, lastID string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.api+"/tracking/events/stream", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// sseReader decodes a stream with the client library the bridge uses.
type sseReader struct {
	t    *testing.T
	body io.ReadCloser
	dec  *eventsource.Decoder
}

func newSSEReader(t *testing.T, resp *http.Response) *sseReader {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream answered %d: %s", resp.StatusCode, b)
	}
	return &sseReader{t: t, body: resp.Body, dec: eventsource.NewDecoder(resp.Body)}
}

// next returns the next message that carries data (skipping a retry:-only block), failing the test after
// 10 s.
func (r *sseReader) next() eventsource.Event {
	r.t.Helper()
	type res struct {
		ev  eventsource.Event
		err error
	}
	ch := make(chan res, 1)
	go func() {
		for {
			ev, err := r.dec.Decode()
			if err != nil || ev.Data() != "" || ev.Id() != "" {
				ch <- res{ev, err}
				return
			}
		}
	}()
	select {
	case x := <-ch:
		if x.err != nil {
			r.t.Fatalf("stream: %v", x.err)
		}
		return x.ev
	case <-time.After(10 * time.Second):
		r.body.Close()
		r.t.Fatal("no event within 10 s")
		return nil
	}
}

// readUntil reads raw stream bytes until they contain want or the stream ends; it fails after 10 s.
func readUntil(t testing.TB, body io.ReadCloser, want string) string {
	t.Helper()
	done := make(chan struct{})
	var got bytes.Buffer
	go func() {
		defer close(done)
		br := bufio.NewReader(body)
		buf := make([]byte, 4096)
		for !strings.Contains(got.String(), want) {
			n, err := br.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		body.Close()
		<-done
		t.Fatalf("no %q within 10 s; got %q", want, got.String())
	}
	return got.String()
}

// waitFor polls cond until it holds, failing after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, what, cond)
}
