// Package streams owns the layout of the bridge's three JetStream streams (contract §4) and the name of
// the lease bucket (contract §6): their names, subjects and configuration, creating them at start-up, and
// reading a stream's message size bound. The daemon, the event publisher (internal/publish) and the report
// consumer (internal/consume) all use it.
package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Layout names the bridge's three JetStream streams and their subjects (contract §4), and the lease
// bucket (contract §6).
type Layout struct {
	Prefix string // P, e.g. "tracking"
	// DuplicateWindow of the events and dead-letter streams.
	DuplicateWindow time.Duration
	// Replicas of the streams when they are created; 1 when zero.
	Replicas int
}

// StreamName returns PFX_<KIND>: the prefix upper-cased, characters other than [A-Z0-9] as "_".
func (l Layout) StreamName(kind string) string {
	pfx := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' {
			return r - 'a' + 'A'
		}
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, l.Prefix)
	return pfx + "_" + kind
}

// Events, Reports and DLQ are the stream names.
func (l Layout) Events() string  { return l.StreamName("EVENTS") }
func (l Layout) Reports() string { return l.StreamName("REPORTS") }
func (l Layout) DLQ() string     { return l.StreamName("DLQ") }

// Leases is the key-value bucket of the leader lease, PFX_LEASES.
func (l Layout) Leases() string { return l.StreamName("LEASES") }

// FenceSubject is P.leader, the base of the events stream's fence subjects P.leader.<n> (see
// publish.FenceWidth) and P.leader.restart: every new leader stores a marker on each, and every event it
// publishes is stored only while its marker is still the last message of the subject it checks, so a
// former leader that was paused or cut off cannot add an event after another took over. They lie outside
// P.events.>, so event consumers filtering on that never see them.
func (l Layout) FenceSubject() string { return l.Prefix + ".leader" }

// fenceFilter is the events stream's subject filter for the fence subjects, P.leader.>.
func (l Layout) fenceFilter() string { return l.FenceSubject() + ".>" }

// ReportsSubject is P.reports, where producers publish reports.
func (l Layout) ReportsSubject() string { return l.Prefix + ".reports" }

// ReportsDLQSubject is P.dlq.reports, where rejected reports go.
func (l Layout) ReportsDLQSubject() string { return l.Prefix + ".dlq.reports" }

// Configs returns the wanted configuration of the three streams.
func (l Layout) Configs() []jetstream.StreamConfig {
	dup := l.DuplicateWindow
	if dup <= 0 {
		dup = 2 * time.Minute
	}
	replicas := max(l.Replicas, 1)
	return []jetstream.StreamConfig{
		{Name: l.Events(), Subjects: []string{l.Prefix + ".events.>", l.fenceFilter()},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Duplicates: dup, Replicas: replicas,
			Description: "tracking events from the upstream stream, one subject per event type; the leaders' fence markers"},
		{Name: l.Reports(), Subjects: []string{l.ReportsSubject()}, Retention: jetstream.WorkQueuePolicy,
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: replicas,
			Description: "tracking event reports waiting to be sent upstream"},
		{Name: l.DLQ(), Subjects: []string{l.Prefix + ".dlq.>"}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Duplicates: dup, Replicas: replicas,
			Description: "events and reports the bridge could not deliver, with Bridge-Error"},
	}
}

// Ensure makes sure the three streams exist. With create it creates missing ones; a stream that
// exists with another configuration is used as it is and the differences are logged. Without create, a
// missing stream is an error.
func Ensure(ctx context.Context, js jetstream.JetStream, l Layout, create bool, log *slog.Logger) error {
	var errs []error
	for _, want := range l.Configs() {
		s, err := js.Stream(ctx, want.Name)
		switch {
		case err == nil && want.Name == l.Events() && !slices.Contains(s.CachedInfo().Config.Subjects, l.fenceFilter()):
			// A stream made before fencing: it needs the fence subject, or no leader can publish.
			if err := addFence(ctx, js, s.CachedInfo().Config, l, create, log); err != nil {
				errs = append(errs, err)
			}
		case err == nil:
			if have := s.CachedInfo().Config; want.Name == l.Events() && have.AllowDirect && have.Replicas > 1 {
				log.Warn("the events stream allows direct gets: a new leader's look-up of the newest event may be "+
					"answered by a replica a little behind, and the upstream then replays what the duplicate "+
					"window has to recognise; turn allow_direct off", "stream", want.Name)
			}
			if diff := streamDiff(want, s.CachedInfo().Config); diff != "" {
				log.Warn("stream exists with another configuration; using it as it is",
					"stream", want.Name, "differences", diff)
			}
		case errors.Is(err, jetstream.ErrStreamNotFound) && create:
			if _, err := js.CreateStream(ctx, want); err != nil {
				errs = append(errs, fmt.Errorf("creating stream %s: %w", want.Name, err))
				continue
			}
			log.Info("stream created", "stream", want.Name, "subjects", want.Subjects)
		case errors.Is(err, jetstream.ErrStreamNotFound):
			errs = append(errs, fmt.Errorf("%w: %s, and BRIDGE_CREATE_STREAMS is false", jetstream.ErrStreamNotFound, want.Name))
		default:
			errs = append(errs, fmt.Errorf("looking up stream %s: %w", want.Name, err))
		}
	}
	return errors.Join(errs...)
}

// addFence adds the fence subject to an existing events stream, when the bridge manages the streams.
func addFence(ctx context.Context, js jetstream.JetStream, have jetstream.StreamConfig, l Layout, create bool, log *slog.Logger) error {
	if !create {
		return fmt.Errorf("%w: stream %s lacks the subjects %s that fence a former leader out (contract §6); "+
			"add it to the stream's subjects, or set BRIDGE_CREATE_STREAMS=true", ErrNoFence, have.Name, l.fenceFilter())
	}
	have.Subjects = append(slices.Clone(have.Subjects), l.fenceFilter())
	if _, err := js.UpdateStream(ctx, have); err != nil {
		return fmt.Errorf("adding the fence subjects %s to stream %s: %w", l.fenceFilter(), have.Name, err)
	}
	log.Info("fence subjects added to the events stream", "stream", have.Name, "subjects", l.fenceFilter())
	return nil
}

// ErrNoFence is Ensure's error when the events stream lacks the fence subject and may not be changed.
var ErrNoFence = errors.New("events stream without fence subject")

// streamDiff describes how have differs from want in the settings the bridge relies on.
func streamDiff(want, have jetstream.StreamConfig) string {
	var d []string
	if !slices.Equal(want.Subjects, have.Subjects) {
		d = append(d, fmt.Sprintf("subjects %v (want %v)", have.Subjects, want.Subjects))
	}
	if want.Retention != have.Retention {
		d = append(d, fmt.Sprintf("retention %v (want %v)", have.Retention, want.Retention))
	}
	if want.Storage != have.Storage {
		d = append(d, fmt.Sprintf("storage %v (want %v)", have.Storage, want.Storage))
	}
	if want.Replicas != have.Replicas {
		d = append(d, fmt.Sprintf("replicas %d (want %d)", have.Replicas, want.Replicas))
	}
	if want.Duplicates != have.Duplicates {
		d = append(d, fmt.Sprintf("duplicate window %v (want %v)", have.Duplicates, want.Duplicates))
	}
	return strings.Join(d, "; ")
}

// MaxMsgSize returns the max_msg_size of the named stream (0: no bound).
func MaxMsgSize(ctx context.Context, js jetstream.JetStream, name string) (int64, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	return max(int64(s.CachedInfo().Config.MaxMsgSize), 0), nil
}
