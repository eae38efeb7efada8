package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// statusDoc is the body of GET /status: what an operator asks first, in one JSON document. Is the
// bridge ready, and if not why; where the event stream stands; from which event it would resume. Event ids
// are here rather than in metric labels, where every new id would start a new time series.
type statusDoc struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Ready   bool   `json:"ready"`
	// Role is "leader" while this bridge holds the lease and reads the upstream stream, else "standby".
	Role    string         `json:"role"`
	Lease   statusLease    `json:"lease"`
	Checks  []statusCheck  `json:"checks"` // the /readyz checks, in its order
	Stream  statusStream   `json:"stream"`
	NATS    statusNATS     `json:"nats"`
	Reports *statusReports `json:"reports,omitempty"` // once the report consumer is set up
	// Units is the units view's state; {"enabled": false} when BRIDGE_UNITS_VIEW is false.
	Units *statusUnits `json:"units"`
}

// statusUnits is the units view's section (docs/operations.md#the-units-view). Its readiness is its
// own: it does not count in the document's "ready" nor in /readyz.
type statusUnits struct {
	Enabled bool   `json:"enabled"`
	Bucket  string `json:"bucket,omitempty"`
	Ready   bool   `json:"ready"`
	Reason  string `json:"reason,omitempty"`
	// LagEvents is the events of the stream the view has not applied yet; LagSeconds how long ago the
	// stream stored the first of them (0 when none is left).
	LagEvents  uint64  `json:"lag_events"`
	LagSeconds float64 `json:"lag_seconds"`
	// Yielding is true while the events stream stores events faster than the view's rate: it takes a
	// hundredth of it and catches up after (docs/operations.md#the-units-view).
	Yielding bool `json:"yielding"`
	// LastAppliedAt is when this bridge last made an event its unit's value.
	LastAppliedAt *time.Time `json:"last_applied_at"`
	// Events counts the events this bridge took since start-up, by outcome (bridge_units_events_total).
	Events    map[string]uint64 `json:"events,omitempty"`
	Conflicts uint64            `json:"write_conflicts"`
}

// statusLease names the lease's holder, this bridge or another (docs/replicas.md#the-lease).
type statusLease struct {
	Bucket string `json:"bucket"`
	TTL    string `json:"ttl"`
	// Self is this process as it would write itself into the lease.
	Self statusHolder `json:"self"`
	// Holder is the latest known holder; null while the lease is free or not known yet.
	Holder *statusHolder `json:"holder"`
}

type statusHolder struct {
	Name     string `json:"name"`
	PID      int    `json:"pid"`
	Instance string `json:"instance"`
	Epoch    uint64 `json:"epoch,omitempty"`
}

type statusCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

type statusStream struct {
	State     string `json:"state"`
	LastError string `json:"last_error,omitempty"` // why the last connection attempt ended
	// LastReceivedID is the id of the last event read from the upstream ("" while none).
	LastReceivedID string `json:"last_received_id"`
	// ResumeAfter is the id up to which every event is stored in JetStream: the Last-Event-ID of the next
	// connection ("" while nothing was stored: the stream starts from the upstream's live edge).
	ResumeAfter string `json:"resume_after"`
	// Duplicates counts the events found stored before and not stored again, since start-up: JetStream's
	// duplicates and the upstream's replays skipped by the resume cursor (bridge_events_duplicates_total).
	Duplicates  uint64     `json:"duplicates"`
	LastEventAt *time.Time `json:"last_event_at"` // null while no event arrived since start-up
	LastBytesAt *time.Time `json:"last_bytes_at"` // keep-alive comments included
}

type statusNATS struct {
	Connected  bool   `json:"connected"`
	Status     string `json:"status"`
	Reconnects uint64 `json:"reconnects"`
}

type statusReports struct {
	Pending uint64 `json:"pending"` // reports in the stream not yet settled
}

// status gathers the status document: the readiness checks, run as for /readyz, and each part's section.
func (o *ops) status(ctx context.Context) statusDoc {
	doc := statusDoc{Version: o.d.info.Version, Commit: o.d.info.Commit, Checks: []statusCheck{},
		Units: &statusUnits{}}
	rs := o.ready.Evaluate(ctx)
	doc.Ready = len(rs) > 0
	for _, r := range rs {
		c := statusCheck{Name: r.Name, OK: r.Err == nil}
		if r.Err != nil {
			c.Reason, doc.Ready = r.Err.Error(), false // the checks' errors carry no secret
		}
		doc.Checks = append(doc.Checks, c)
	}
	for _, p := range o.d.parts {
		if w, ok := p.c.(statusWriter); ok {
			w.status(&doc)
		}
	}
	return doc
}

func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// statusHandler serves GET /status. It always answers 200: gate on /readyz, read here.
func (o *ops) statusHandler(w http.ResponseWriter, r *http.Request) {
	doc := o.status(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(doc)
}

// statusID bounds an upstream id shown in /status: every id the bridge can resume after is shown whole,
// a longer one (up to an event's size) is cut short with its length.
func statusID(id string) string {
	if len(id) <= upstream.MaxResumableID {
		return id
	}
	return fmt.Sprintf("%s (%d bytes)", logging.Value(id, 256), len(id))
}
