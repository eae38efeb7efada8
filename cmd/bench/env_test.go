package main

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/config"
)

// TestBridgeVarsAreTheConfig: the 'bridge run' children get, through their environment, the
// configuration the in-process profile builds in Go. Not parallel: it sets the process environment.
func TestBridgeVarsAreTheConfig(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, config.Prefix+"_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	for _, o := range []benchOptions{{}, {window: 64, cluster: true}} {
		e := &benchEnv{o: o, natsURL: "nats://127.0.0.1:4222"}
		want := e.bridgeConfig(&benchSim{base: "http://127.0.0.1:8081"}, "bench7", "127.0.0.1:9090")
		vars, err := want.Environ()
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range vars {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		got, err := config.FromEnv()
		if err != nil {
			t.Fatalf("%+v: the children's environment does not load: %v", o, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: the children's environment loads as\n%+v\nthe in-process configuration is\n%+v", o, *got, *want)
		}
	}
}
