package upstream_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// TestResumable: exactly the ids Go's HTTP client sends unchanged as Last-Event-ID are resumable,
// checked against a real request over loopback.
func TestResumable(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Last-Event-ID")
	}))
	defer srv.Close()
	for _, id := range []string{"ev-1", "a b", "a\tb", "Zöll-7", "\u00a0x\u00a0", "", " a", "a ", "\ta",
		"a\t", "a\nb", "a\rb", "a\x00b", "a\x01b", "a\x7fb"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("Last-Event-ID", id)
		resp, err := srv.Client().Do(req)
		sentUnchanged := false
		if err == nil {
			resp.Body.Close()
			sentUnchanged = <-got == id
		}
		if upstream.Resumable(id) != sentUnchanged {
			t.Errorf("Resumable(%q) = %v, but the id sent unchanged: %v (err %v)", id, upstream.Resumable(id), sentUnchanged, err)
		}
	}
}
