package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
	"github.com/tracking-bridge/tracking-bridge/internal/validate"
)

// readmeSection returns the README's section under the heading "## "+title, up to the next one.
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("README.md has no section %q", title)
	}
	section, _, _ := strings.Cut(rest, "\n## ")
	return section
}

// TestRunItLocally follows the README's "Run it locally": its commands start a nats-server from
// deploy/nats/nats-local.conf (the shipped accounts) with the passwords they export, and the simulator where its environment block
// points, that block is a valid configuration for them, and the report file its commands publish
// (examples/report.json) is one the bridge accepts. Then it runs the bridge with that block (on the test's
// ports) against a real NATS server with the shipped accounts and the simulator, publishes the report as
// the README's report producer does, and sees it come back as an event as its events reader does.
func TestRunItLocally(t *testing.T) {
	section := readmeSection(t, "Run it locally")
	for _, want := range []string{
		"go install github.com/nats-io/nats-server/v2@v2.15.2",
		`"$(go env GOPATH)/bin/nats-server" -c deploy/nats/nats-local.conf`,
		"go run ./cmd/sim -addr 127.0.0.1:8081",
		"go run ./cmd/bridge check-config && go run ./cmd/bridge run",
		"go install github.com/nats-io/natscli/nats@v0.4.0",
		"nats --user events-reader --password demo-events-reader sub 'tracking.events.>'",
		"nats --user report-producer --password demo-report-producer \\\n" +
			`  req tracking.reports "$(cat examples/report.json)" -H Nats-Msg-Id:`,
	} {
		if !strings.Contains(section, want) {
			t.Errorf("README's Run it locally lacks %q", want)
		}
	}
	env := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^export (BRIDGE_[A-Z_]+)=(\S+)$`).FindAllStringSubmatch(section, -1) {
		env[m[1]] = m[2]
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := config.FromEnv()
	if err != nil {
		t.Fatalf("README's environment block is not a valid configuration:\n%v", err)
	}
	const simBase, natsURL = "http://127.0.0.1:8081", "nats://127.0.0.1:4222"
	if cfg.UpstreamURL != simBase+sim.DefaultBasePath || cfg.TokenURL != simBase+sim.TokenPath ||
		cfg.ClientID != sim.DefaultClientID || cfg.NATSURL != natsURL {
		t.Errorf("README's environment block does not point at the simulator on %s and NATS on %s: %v", simBase, natsURL, env)
	}

	report, err := os.ReadFile(filepath.Join("..", "..", "examples", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if problems := validate.Report(report, config.Default().ReportMaxBytes); problems != nil {
		t.Fatalf("examples/report.json is not a report the bridge accepts: %q", problems)
	}

	// The server as the README starts it: deploy/nats/nats-local.conf with the passwords it exports.
	passwords := regexp.MustCompile(`(NATS_[A-Z_]+_PASSWORD)=(\S+)`).FindAllStringSubmatch(section, -1)
	if len(passwords) != 5 {
		t.Fatalf("README's Run it locally exports %d NATS_*_PASSWORD variables, want the 5 the server reads", len(passwords))
	}
	for _, m := range passwords {
		t.Setenv(m[1], m[2])
	}
	shipped, err := server.ProcessConfigFile(filepath.Join("..", "..", "deploy", "nats", "nats-local.conf"))
	if err != nil {
		t.Fatalf("deploy/nats/nats-local.conf: %v", err)
	}
	if shipped.Host != "127.0.0.1" || shipped.Port != 4222 || shipped.HTTPHost != "127.0.0.1" || !shipped.JetStream {
		t.Errorf("deploy/nats/nats-local.conf: listen %s:%d, monitoring on %s, JetStream %v; want loopback, port 4222 and JetStream",
			shipped.Host, shipped.Port, shipped.HTTPHost, shipped.JetStream)
	}
	ns := testutil.StartNATS(t, func(o *server.Options) {
		o.Accounts, o.Users, o.MaxPayload = shipped.Accounts, shipped.Users, shipped.MaxPayload
	})
	client := func(user, password string) *nats.Conn {
		nc, err := nats.Connect(ns.URL(), nats.UserInfo(user, password))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}

	// The block, on the test's ports.
	up := simtest.Start(t, false, sim.Options{EventRate: 5})
	for k, v := range env {
		v = strings.Replace(v, simBase, up.Srv.URL, 1)
		v = strings.Replace(v, natsURL, ns.URL(), 1)
		if k == "BRIDGE_HTTP_ADDR" {
			v = "127.0.0.1:0"
		}
		t.Setenv(k, v)
	}
	stderr, stop := startRun(t, []string{"run"}, "stream connected")
	defer stop()

	reader := client("events-reader", "demo-events-reader")
	back := make(chan *nats.Msg, 64)
	// The README finds the report among its container's events, by the unit token of the subject.
	sub, err := reader.ChanSubscribe("tracking.events.*.MSCU1234565", back)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := reader.Flush(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(client("report-producer", "demo-report-producer"))
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: "tracking.reports", Data: report, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, "example-report-1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("publishing examples/report.json: %v", err)
	}
	timeout := time.After(15 * time.Second)
	for {
		select {
		case m := <-back:
			if bytes.Contains(m.Data, []byte(`"HH-EX 4711"`)) {
				return
			}
		case <-timeout:
			t.Fatalf("examples/report.json did not come back as an event of its container within 15s:\n%s", stderr.String())
		}
	}
}

// TestDocsCommandsRunAsWritten: the documents' commands work as written, in a script as in a terminal.
// No command is 'nats stream view', which refuses to run without a terminal; the nats CLI is installed
// with go install; and a file an --env-file names exists in the repository, or a cp before it creates
// it.
func TestDocsCommandsRunAsWritten(t *testing.T) {
	envFile := regexp.MustCompile(`--env-file (\S+)`)
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	for i := range docs {
		docs[i], _ = filepath.Rel(filepath.Join("..", ".."), docs[i])
	}
	for _, doc := range append([]string{"README.md", "Dockerfile", "docker-compose.yml"}, docs...) {
		raw, err := os.ReadFile(filepath.Join("..", "..", doc))
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		for i, line := range strings.Split(text, "\n") {
			cmd := strings.TrimLeft(line, " #`$")
			if strings.HasPrefix(cmd, "nats stream view") || strings.Contains(cmd, "/nats stream view") {
				t.Errorf("%s:%d: 'nats stream view' needs a terminal: %s", doc, i+1, line)
			}
			for _, m := range envFile.FindAllStringSubmatch(line, -1) {
				name := strings.Trim(m[1], "`")
				if _, err := os.Stat(filepath.Join("..", "..", name)); err == nil {
					continue
				}
				before := strings.Join(strings.Split(text, "\n")[:i], "\n")
				if !regexp.MustCompile(`cp \S+ ` + regexp.QuoteMeta(name) + `\b`).MatchString(before) {
					t.Errorf("%s:%d: --env-file %s names a file that neither exists nor is created before", doc, i+1, name)
				}
			}
		}
	}
	subjects, err := os.ReadFile(filepath.Join("..", "..", "docs", "subjects.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(subjects), "go install github.com/nats-io/natscli/nats@v0.4.0") {
		t.Error("docs/subjects.md's nats CLI section does not install it with go install github.com/nats-io/natscli/nats@v0.4.0")
	}
}
