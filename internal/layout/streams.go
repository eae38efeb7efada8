package layout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Streams names the bridge's three JetStream streams and their subjects (docs/subjects.md#streams), and the
// lease bucket (docs/replicas.md#the-lease). Its bounds and limits apply when Ensure creates
// a stream; their zero values mean no bound, as in a layout used only for its names.
type Streams struct {
	Prefix string // P, e.g. "tracking"
	// DuplicateWindow of the events and dead-letter streams.
	DuplicateWindow time.Duration
	// Replicas of the streams when they are created; 1 when zero.
	Replicas int
	// MaxEventBytes and MaxReportBytes bound the data of one event (BRIDGE_STREAM_MAX_EVENT_BYTES) and
	// of one report (BRIDGE_REPORT_MAX_BYTES); the streams' largest messages follow from them (MsgSizes).
	MaxEventBytes, MaxReportBytes int
	// EventsLimits, ReportsLimits and DLQLimits are the total size and age of each stream.
	EventsLimits, ReportsLimits, DLQLimits Limits
}

// Limits are a stream's total size and age; zero means none.
type Limits struct {
	MaxBytes int64
	MaxAge   time.Duration
}

// HeaderRoom is what a stream's max_msg_size allows above the bound of a message's data: the largest
// header block JetStream stores (65,535 bytes), rounded up. So no message whose data is within its bound
// is refused for its headers, and one past its bound by more than that is refused to its publisher: a
// producer's 2 MB report is refused at publishing instead of being stored, then copied whole to the
// dead-letter stream.
const HeaderRoom = 64 << 10

// MsgSizes returns the max_msg_size of the events, reports and dead-letter streams: the data bound of
// what each stores plus HeaderRoom. A dead letter holds an event or a report (anything larger is replaced
// by a short description, see Fit), so the dead-letter stream's bound is the larger of
// the two. Zero: no bound (the data bound is zero, or the sum exceeds what JetStream's int32 holds, which
// config.Validate rules out).
func (l Streams) MsgSizes() (events, reports, dlq int32) {
	size := func(data int) int32 {
		if data <= 0 || int64(data)+HeaderRoom > math.MaxInt32 {
			return 0
		}
		return int32(int64(data) + HeaderRoom)
	}
	events, reports = size(l.MaxEventBytes), size(l.MaxReportBytes)
	if events > 0 && reports > 0 {
		dlq = max(events, reports)
	}
	return events, reports, dlq
}

// StreamName returns PFX_<KIND>: the prefix upper-cased, characters other than [A-Z0-9] as "_"
// (Stream names them all).
func (l Streams) StreamName(kind string) string { return Stream(l.Prefix, kind) }

// Events, Reports and DLQ are the stream names.
func (l Streams) Events() string  { return EventsStream(l.Prefix) }
func (l Streams) Reports() string { return ReportsStream(l.Prefix) }
func (l Streams) DLQ() string     { return DLQStream(l.Prefix) }

// Leases is the key-value bucket of the leader lease, PFX_LEASES.
func (l Streams) Leases() string { return LeaseBucket(l.Prefix) }

// Units is the name of the bucket of the latest event per loading unit, PFX_UNITS.
func (l Streams) Units() string { return UnitsBucket(l.Prefix) }

// FenceSubject is P.leader, the base of the events stream's fence subjects P.leader.<n> (see
// publish.FenceWidth) and P.leader.restart: every new leader stores a marker on each, and every event it
// publishes is stored only while its marker is still the last message of the subject it checks, so a
// former leader that was paused or cut off cannot add an event after another took over. They lie outside
// P.events.>, so event consumers filtering on that never see them.
func (l Streams) FenceSubject() string { return Fence(l.Prefix) }

// EventsSubject is P.events.>, every event of every type.
func (l Streams) EventsSubject() string { return Events(l.Prefix) }

// ReportsSubject is P.reports, where producers publish reports.
func (l Streams) ReportsSubject() string { return Reports(l.Prefix) }

// ReportsDLQSubject is P.dlq.reports, where rejected reports go.
func (l Streams) ReportsDLQSubject() string { return DLQReports(l.Prefix) }

// Configs returns the wanted configuration of the three streams. The events and dead-letter streams
// discard their oldest messages when full (DiscardOld), so neither the event path nor a flood of dead
// letters can ever stall on them; the reports work queue refuses new reports when full (DiscardNew), so
// a producer learns at publishing that its report was not taken, and none is removed without a trace.
// The events stream allows rollups (Nats-Rollup), with which each fence marker replaces the one before
// it on its subject (see FenceSubject).
func (l Streams) Configs() []jetstream.StreamConfig {
	dup := l.DuplicateWindow
	if dup <= 0 {
		dup = 2 * time.Minute
	}
	replicas := max(l.Replicas, 1)
	events, reports, dlq := l.MsgSizes()
	return []jetstream.StreamConfig{
		{Name: l.Events(), Subjects: []string{Events(l.Prefix), FenceFilter(l.Prefix)},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Duplicates: dup, Replicas: replicas,
			MaxMsgSize: events, MaxBytes: limit(l.EventsLimits.MaxBytes), MaxAge: l.EventsLimits.MaxAge,
			Discard: jetstream.DiscardOld, AllowRollup: true,
			Description: "tracking events from the upstream stream, one subject per event type; the leaders' fence markers"},
		{Name: l.Reports(), Subjects: []string{l.ReportsSubject()}, Retention: jetstream.WorkQueuePolicy,
			Storage: jetstream.FileStorage, Duplicates: ReportsDuplicateWindow, Replicas: replicas,
			MaxMsgSize: reports, MaxBytes: limit(l.ReportsLimits.MaxBytes), MaxAge: l.ReportsLimits.MaxAge,
			Discard:     jetstream.DiscardNew,
			Description: "tracking event reports waiting to be sent upstream"},
		{Name: l.DLQ(), Subjects: []string{DLQ(l.Prefix)}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Duplicates: dup, Replicas: replicas,
			MaxMsgSize: dlq, MaxBytes: limit(l.DLQLimits.MaxBytes), MaxAge: l.DLQLimits.MaxAge,
			Discard:     jetstream.DiscardOld,
			Description: "events and reports the bridge could not deliver, with Bridge-Error"},
	}
}

// ReportsDuplicateWindow is the duplicate window of the reports stream: a producer's retry of a publish
// whose acknowledgement it lost, with the same Nats-Msg-Id, is stored once.
const ReportsDuplicateWindow = 2 * time.Minute

// limit is a size limit as JetStream writes it: -1 for none.
func limit(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// Ensure makes sure the three streams exist. With create it creates missing ones; a stream that
// exists with another configuration is used as it is and the differences are logged, except that an
// events stream made before the fence gets what the fence needs (see upgradeEvents). Without create, a
// missing stream, or an events stream without what the fence needs, is an error.
func (l Streams) Ensure(ctx context.Context, js jetstream.JetStream, create bool, log *slog.Logger) error {
	var errs []error
	for _, want := range l.Configs() {
		s, err := js.Stream(ctx, want.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound) && create:
			if _, err := js.CreateStream(ctx, want); err != nil {
				var api *jetstream.APIError
				if errors.As(err, &api) && (api.ErrorCode == errStorageResourcesExceeded || api.ErrorCode == errMaxStreamBytesExceeded) {
					err = fmt.Errorf("%w: %w; JetStream reserves a stream's max_bytes (%d here) from the server's "+
						"max_file_store and the account's limits when it creates it, so they must hold the three "+
						"streams' together", ErrNoRoom, err, want.MaxBytes)
				}
				errs = append(errs, fmt.Errorf("creating stream %s: %w", want.Name, err))
				continue
			}
			log.Info("stream created", "stream", want.Name, "subjects", want.Subjects,
				"max_msg_size", want.MaxMsgSize, "max_bytes", want.MaxBytes, "max_age", want.MaxAge.String(),
				"discard", want.Discard.String())
		case errors.Is(err, jetstream.ErrStreamNotFound):
			errs = append(errs, fmt.Errorf("%w: %s, and BRIDGE_CREATE_STREAMS is false", jetstream.ErrStreamNotFound, want.Name))
		case err != nil:
			errs = append(errs, fmt.Errorf("looking up stream %s: %w", want.Name, err))
		default:
			have := s.CachedInfo().Config
			if want.Name == l.Events() {
				if have, err = upgradeEvents(ctx, js, have, l, create, log); err != nil {
					errs = append(errs, err)
					continue
				}
				if have.AllowDirect && have.Replicas > 1 {
					log.Warn("the events stream allows direct gets: a new leader's look-up of the newest event may be "+
						"answered by a replica a little behind, and the upstream then replays what the duplicate "+
						"window has to recognise; turn allow_direct off", "stream", want.Name)
				}
			}
			if diff := streamDiff(want, have); diff != "" {
				log.Warn("stream exists with another configuration; using it as it is",
					"stream", want.Name, "differences", diff)
			}
		}
	}
	return errors.Join(errs...)
}

// upgradeEvents gives an events stream made before the fence what the fence needs, when the bridge
// manages the streams: the subjects P.leader.>, and rollups (allow_rollup_hdrs), with which each marker
// replaces the one before it on its subject. Without them no leader can publish, or the markers pile up
// (1,024 more with every change of leader). It returns the stream's configuration as it is then.
func upgradeEvents(ctx context.Context, js jetstream.JetStream, have jetstream.StreamConfig, l Streams, create bool,
	log *slog.Logger) (jetstream.StreamConfig, error) {
	var missing []string
	if !slices.Contains(have.Subjects, FenceFilter(l.Prefix)) {
		missing = append(missing, "the subjects "+FenceFilter(l.Prefix))
	}
	if !have.AllowRollup {
		missing = append(missing, "rollups (allow_rollup_hdrs)")
	}
	switch {
	case len(missing) == 0:
		return have, nil
	case have.DenyPurge:
		// A rollup is a purge: JetStream allows neither on a stream that denies purges.
		return have, fmt.Errorf("%w: stream %s lacks %s that the fence needs, and denies purges (deny_purge), "+
			"without which JetStream allows no rollup; allow purges on it", ErrNoFence, have.Name,
			strings.Join(missing, " and "))
	case !create:
		return have, fmt.Errorf("%w: stream %s lacks %s that fence a former leader out; "+
			"add them to the stream, or set BRIDGE_CREATE_STREAMS=true", ErrNoFence, have.Name, strings.Join(missing, " and "))
	}
	upd := have
	upd.Subjects = slices.Clone(have.Subjects)
	if !slices.Contains(upd.Subjects, FenceFilter(l.Prefix)) {
		upd.Subjects = append(upd.Subjects, FenceFilter(l.Prefix))
	}
	upd.AllowRollup = true
	s, err := js.UpdateStream(ctx, upd)
	if err != nil {
		return have, fmt.Errorf("adding %s to stream %s: %w", strings.Join(missing, " and "), have.Name, err)
	}
	log.Info("the events stream now has what the fence needs", "stream", have.Name, "added", strings.Join(missing, ", "))
	return s.CachedInfo().Config, nil
}

// ErrNoRoom is Ensure's error when JetStream cannot reserve a stream's max_bytes: the server's
// max_file_store, or the account's limits, are smaller than the streams' limits together.
var ErrNoRoom = errors.New("no room in JetStream for the stream's max_bytes")

// JetStream's error codes for a stream whose max_bytes the server or the account cannot reserve.
const (
	errStorageResourcesExceeded = 10047 // insufficient storage resources available
	errMaxStreamBytesExceeded   = 10122 // stream max bytes exceeds account limit max stream bytes
)

// ErrNoFence is Ensure's error when the events stream lacks what the fence needs (its subjects, rollups)
// and may not be changed.
var ErrNoFence = errors.New("events stream without what the fence needs")

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
	if w, h := limit(int64(want.MaxMsgSize)), limit(int64(have.MaxMsgSize)); w != h {
		d = append(d, fmt.Sprintf("max_msg_size %s (want %s)", bound(h), bound(w)))
	}
	if w, h := limit(want.MaxBytes), limit(have.MaxBytes); w != h {
		d = append(d, fmt.Sprintf("max_bytes %s (want %s)", bound(h), bound(w)))
	}
	if want.MaxAge != have.MaxAge {
		d = append(d, fmt.Sprintf("max_age %v (want %v)", have.MaxAge, want.MaxAge))
	}
	if want.Discard != have.Discard {
		d = append(d, fmt.Sprintf("discard %v (want %v)", have.Discard, want.Discard))
	}
	return strings.Join(d, "; ")
}

// bound writes a size limit as JetStream writes it, -1 as "none".
func bound(n int64) string {
	if n < 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

// MaxMsgSize returns the max_msg_size of the named stream (0: no bound).
func MaxMsgSize(ctx context.Context, js jetstream.JetStream, name string) (int64, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	return max(int64(s.CachedInfo().Config.MaxMsgSize), 0), nil
}
