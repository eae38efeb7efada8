package layout_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

func TestStreamNames(t *testing.T) {
	tests := []struct{ prefix, want string }{
		{"tracking", "TRACKING"},
		{"acme.tracking", "ACME_TRACKING"},
		{"acme-prod_v2", "ACME_PROD_V2"},
		{"trück", "TR_CK"},
	}
	for _, tt := range tests {
		l := layout.Streams{Prefix: tt.prefix}
		if l.Events() != tt.want+"_EVENTS" || l.Reports() != tt.want+"_REPORTS" || l.DLQ() != tt.want+"_DLQ" {
			t.Errorf("prefix %q: %s %s %s, want %s_*", tt.prefix, l.Events(), l.Reports(), l.DLQ(), tt.want)
		}
	}
	l := layout.Streams{Prefix: "tracking"}
	if l.ReportsSubject() != "tracking.reports" || l.ReportsDLQSubject() != "tracking.dlq.reports" {
		t.Errorf("subjects %s %s", l.ReportsSubject(), l.ReportsDLQSubject())
	}
}

// FuzzStreamName: any prefix gives a usable JetStream stream name.
func FuzzStreamName(f *testing.F) {
	for _, s := range []string{"tracking", "a.b-c", "ü*>. ", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, prefix string) {
		got := layout.Streams{Prefix: prefix}.Events()
		if strings.TrimFunc(got, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' }) != "" {
			t.Errorf("prefix %q gives stream name %q: not [A-Z0-9_]+", prefix, got)
		}
	})
}

// limitedLayout is a layout with the bounds and limits the daemon derives from the defaults.
func limitedLayout() layout.Streams {
	return layout.Streams{Prefix: "tracking", DuplicateWindow: time.Minute, Replicas: 1,
		MaxEventBytes: 1 << 20, MaxReportBytes: 256 << 10,
		EventsLimits:  layout.Limits{MaxBytes: 4 << 30},
		ReportsLimits: layout.Limits{MaxBytes: 1 << 30},
		DLQLimits:     layout.Limits{MaxBytes: 1 << 30, MaxAge: 720 * time.Hour}}
}

func jsFor(t *testing.T) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(testutil.StartNATS(t, nil).Connect())
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestEnsureCreatesLimitedStreams: every stream is created with its largest message (its data bound plus
// HeaderRoom; the dead-letter stream's the larger of the two), its size and age, and its discard policy;
// the events stream allows rollups.
func TestEnsureCreatesLimitedStreams(t *testing.T) {
	js := jsFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	l := limitedLayout()
	if err := l.Ensure(ctx, js, true, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		name     string
		msgSize  int32
		bytes    int64
		age      time.Duration
		discard  jetstream.DiscardPolicy
		rollups  bool
		subjects []string
	}{
		{l.Events(), 1<<20 + 64<<10, 4 << 30, 0, jetstream.DiscardOld, true, []string{"tracking.events.>", "tracking.leader.>"}},
		{l.Reports(), 256<<10 + 64<<10, 1 << 30, 0, jetstream.DiscardNew, false, []string{"tracking.reports"}},
		{l.DLQ(), 1<<20 + 64<<10, 1 << 30, 720 * time.Hour, jetstream.DiscardOld, false, []string{"tracking.dlq.>"}},
	} {
		s, err := js.Stream(ctx, want.name)
		if err != nil {
			t.Fatal(err)
		}
		c := s.CachedInfo().Config
		if c.MaxMsgSize != want.msgSize || c.MaxBytes != want.bytes || c.MaxAge != want.age ||
			c.Discard != want.discard || c.AllowRollup != want.rollups || !slices.Equal(c.Subjects, want.subjects) {
			t.Errorf("%s: max_msg_size %d, max_bytes %d, max_age %v, discard %v, rollups %v, subjects %v; want %+v",
				want.name, c.MaxMsgSize, c.MaxBytes, c.MaxAge, c.Discard, c.AllowRollup, c.Subjects, want)
		}
	}
}

// TestLimitsRefuseAtThePublisher: a report larger than its bound plus the header room is refused to its
// producer, not stored (then copied whole into the dead-letter stream); one within it is stored whatever
// its headers; a full reports stream refuses new reports (DiscardNew) and keeps those it has; a full
// dead-letter stream drops its oldest (DiscardOld) and takes the new one.
func TestLimitsRefuseAtThePublisher(t *testing.T) {
	js := jsFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	l := limitedLayout()
	// Room for three messages of each kind below, not four.
	l.MaxEventBytes, l.MaxReportBytes = 100_000, 1000
	l.ReportsLimits.MaxBytes = 230_000
	l.DLQLimits.MaxBytes = 350_000
	if err := l.Ensure(ctx, js, true, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, data, header int) error {
		m := nats.NewMsg(subject)
		m.Data = make([]byte, data)
		if header > 0 {
			m.Header.Set("Padding", strings.Repeat("x", header))
		}
		_, err := js.PublishMsg(ctx, m)
		return err
	}
	if err := publish(l.ReportsSubject(), 2_000_000, 0); !layout.TooLarge(err) {
		t.Errorf("a 2 MB report: %v, want refused as too large", err)
	}
	if err := publish(l.ReportsSubject(), 1000+layout.HeaderRoom+1, 0); !layout.TooLarge(err) {
		t.Errorf("a report past its bound plus the header room: %v, want refused as too large", err)
	}
	for i := range 3 { // within the bound, with the largest header block JetStream stores
		if err := publish(l.ReportsSubject(), 1000, layout.MaxHeaderBlock-100); err != nil {
			t.Fatalf("report %d at its bound with large headers: %v", i, err)
		}
	}
	var api *jetstream.APIError
	// 10077: "maximum bytes exceeded", JetStream's answer to a publish into a full DiscardNew stream.
	if err := publish(l.ReportsSubject(), 1000, layout.MaxHeaderBlock-100); !errors.As(err, &api) || api.ErrorCode != 10077 {
		t.Errorf("a report into a full reports stream: %v, want refused with 10077", err)
	}
	if n := testutil.StreamMsgs(t, js, l.Reports()); n != 3 {
		t.Errorf("the full reports stream holds %d reports, want the 3 it took", n)
	}

	for i := range 4 {
		if err := publish("tracking.dlq.events", 100_000, 1000); err != nil {
			t.Fatalf("dead letter %d: %v", i, err)
		}
	}
	s, err := js.Stream(ctx, l.DLQ())
	if err != nil {
		t.Fatal(err)
	}
	if st := s.CachedInfo().State; st.Msgs != 3 || st.LastSeq != 4 {
		t.Errorf("the full dead-letter stream holds %d messages up to %d, want the newest 3 up to 4", st.Msgs, st.LastSeq)
	}
}

// TestEnsureUpgradesEventsStream: an events stream made before the fence gets its subjects and rollups
// when the bridge manages the streams; otherwise start-up fails naming both; a stream that denies purges
// (no rollup possible) fails even then. Other differences (here the limits) are logged, the stream used.
func TestEnsureUpgradesEventsStream(t *testing.T) {
	js := jsFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	l := limitedLayout()
	old := jetstream.StreamConfig{Name: l.Events(), Subjects: []string{"tracking.events.>"}, Storage: jetstream.FileStorage,
		Duplicates: time.Minute}
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}

	err := l.Ensure(ctx, js, false, slog.New(slog.DiscardHandler))
	if !errors.Is(err, layout.ErrNoFence) || !strings.Contains(err.Error(), "tracking.leader.>") ||
		!strings.Contains(err.Error(), "allow_rollup_hdrs") {
		t.Errorf("without BRIDGE_CREATE_STREAMS: %v; want ErrNoFence naming the subjects and rollups", err)
	}

	logs := &testutil.Logs{}
	if err := l.Ensure(ctx, js, true, slog.New(logs)); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, l.Events())
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo().Config; !c.AllowRollup || !slices.Contains(c.Subjects, "tracking.leader.>") {
		t.Errorf("upgraded events stream: rollups %v, subjects %v", c.AllowRollup, c.Subjects)
	}
	diff, _ := logs.Attr("stream exists with another configuration; using it as it is", "differences")
	if d := diff.String(); !strings.Contains(d, "max_bytes none (want 4294967296)") ||
		!strings.Contains(d, "max_msg_size none (want 1114112)") {
		t.Errorf("differences logged: %q; want the limits", d)
	}

	// Rollups are a kind of purge: a stream that denies purges cannot have them.
	if err := js.DeleteStream(ctx, l.Events()); err != nil {
		t.Fatal(err)
	}
	old.Subjects, old.DenyPurge = []string{"tracking.events.>", "tracking.leader.>"}, true
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	err = l.Ensure(ctx, js, true, slog.New(slog.DiscardHandler))
	if !errors.Is(err, layout.ErrNoFence) || !strings.Contains(err.Error(), "deny_purge") {
		t.Errorf("a stream denying purges: %v; want ErrNoFence naming deny_purge", err)
	}
}

// TestEnsureNoRoom: a server whose store cannot hold the streams' max_bytes together refuses to create
// the last one; Ensure says why (ErrNoRoom), and the streams that fit are there.
func TestEnsureNoRoom(t *testing.T) {
	ns := testutil.StartNATS(t, func(o *server.Options) { o.JetStreamMaxStore = 5 << 30 })
	js, err := jetstream.New(ns.Connect())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	err = limitedLayout().Ensure(ctx, js, true, slog.New(slog.DiscardHandler)) // 4 + 1 + 1 GiB
	if !errors.Is(err, layout.ErrNoRoom) || !strings.Contains(err.Error(), "TRACKING_DLQ") ||
		strings.Contains(err.Error(), "TRACKING_REPORTS") {
		t.Errorf("Ensure on a 5 GiB store: %v; want ErrNoRoom for the dead-letter stream only", err)
	}
}
