package sim_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"

	"github.com/launchdarkly/eventsource"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
)

// A simulator that floods three generated events, read with the token and the stream operations.
func Example() {
	s := sim.New(sim.Options{EventRate: -1, EventLimit: 3})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	defer s.Close() // before ts.Close: ends the open stream

	resp, err := http.PostForm(ts.URL+sim.TokenPath, url.Values{
		"grant_type": {"password"}, "username": {"demo"}, "password": {"demo"},
		"client_id": {sim.DefaultClientID}, "scope": {"openid"},
	})
	if err != nil {
		panic(err)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()

	req, _ := http.NewRequest(http.MethodGet, ts.URL+sim.DefaultBasePath+"/tracking/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	dec := eventsource.NewDecoder(resp.Body)
	for seq := 1; seq <= 3; seq++ {
		ev, _ := dec.Decode()
		_, data := s.GeneratedEvent("demo", seq) // what the stream carries, computed
		fmt.Println(ev.Id(), ev.Event(), ev.Data() == string(data))
	}
	// Output:
	// ev-0000000000000001 GATE_IN true
	// ev-0000000000000002 GATE_IN true
	// ev-0000000000000003 GATE_IN true
}

func ExampleEventID() {
	fmt.Println(sim.EventID(42))
	// Output: ev-0000000000000042
}
