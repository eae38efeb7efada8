package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
)

// Headers of the events on P.events.> (docs/subjects.md#event-headers).
const (
	// HeaderMsgID is the event's id: the SSE id, else the data's id, else "sha256:" and the hex digest of
	// the data. An id a header cannot carry as it is (control characters, edge spaces, longer than 1 KiB)
	// travels encoded, as "base64url:…" or "sha256-id:…" (docs/subjects.md, "Event headers").
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderEventID carries the same value as HeaderMsgID.
	HeaderEventID = "Tracking-Event-Id"
	// HeaderEventType is the raw type of the event (control characters removed, at most 1 KiB); absent
	// when the type is missing or not a string.
	HeaderEventType = "Tracking-Event-Type"
)

// CloudEvent holds the CloudEvents 1.0 attributes of an event message (binary content mode of the NATS
// protocol binding: ce-* headers), percent-decoded.
type CloudEvent struct {
	SpecVersion     string    // ce-specversion, "1.0"
	ID              string    // ce-id: the event id, as HeaderMsgID has it
	Source          string    // ce-source: the bridge's BRIDGE_CE_SOURCE, by default the upstream's stream URL
	Type            string    // ce-type: the subject without the unit token, P.events.<TYPE>
	Time            time.Time // ce-time: the event's timestamp; zero when it has none that is an RFC 3339 time
	DataContentType string    // ce-datacontenttype, "application/json"
}

// Event is one tracking event as the bridge published it.
type Event struct {
	// Data is the event's data decoded: what the upstream streamed.
	Data TrackingEvent
	// ID is the event's id (HeaderMsgID), the key JetStream deduplicates on.
	ID string
	// Type is the raw type (HeaderEventType). The subject's type token is TypeToken(Type).
	Type string
	// Unit is the loading unit's token: UnitToken of the data's observation.observedLoadingUnit.loadingUnit.number,
	// NoUnit when the event names none. It is the subject's last token and the unit's key in the units view.
	Unit string
	// Subject is P.events.<TYPE>.<UNIT>, or P.events.<TYPE> for an event stored before the subject
	// carried the unit.
	Subject string
	// CloudEvent holds the ce-* headers.
	CloudEvent CloudEvent
	// Raw is the message's data verbatim, with members TrackingEvent does not know.
	Raw []byte
	// Msg is the JetStream message, for acknowledging it (EventConsumer); nil from DecodeEvent.
	Msg jetstream.Msg
}

// DecodeEvent decodes a message of P.events.> (from a JetStream consumer or a plain subscription). Data
// that is not a TrackingEvent gives a *MalformedEventError; DecodeEvent never panics on any input.
func DecodeEvent(subject string, h nats.Header, data []byte) (*Event, error) {
	ev := &Event{ID: h.Get(HeaderMsgID), Type: h.Get(HeaderEventType), Subject: subject, Raw: data}
	ev.CloudEvent = CloudEvent{SpecVersion: ceHeader(h, "ce-specversion"), ID: ceHeader(h, "ce-id"),
		Source: ceHeader(h, "ce-source"), Type: ceHeader(h, "ce-type"),
		DataContentType: ceHeader(h, "ce-datacontenttype")}
	if t := ceHeader(h, "ce-time"); t != "" {
		ev.CloudEvent.Time, _ = time.Parse(time.RFC3339Nano, t)
	}
	if err := decodeTrackingEvent(data, &ev.Data); err != nil {
		return nil, &MalformedEventError{Subject: subject, ID: ev.ID, Data: data, Err: err}
	}
	ev.Unit = NoUnit
	if o := ev.Data.Observation; o != nil && o.ObservedLoadingUnit != nil && o.ObservedLoadingUnit.LoadingUnit != nil &&
		o.ObservedLoadingUnit.LoadingUnit.Number != nil {
		ev.Unit = UnitToken(*o.ObservedLoadingUnit.LoadingUnit.Number)
	}
	return ev, nil
}

// decodeTrackingEvent decodes data into ev, and refuses an event without the members the document
// requires. The timestamp is read as the bridge reads it (internal/rfc3339): RFC 3339 with "T" and "Z" in
// either case, which time.Time's own decoding refuses in lower case.
func decodeTrackingEvent(data []byte, ev *TrackingEvent) error {
	var in struct {
		TrackingEvent
		Timestamp *string `json:"timestamp"` // the shallower field: the embedded one stays unset
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	*ev = in.TrackingEvent
	switch {
	case in.Timestamp == nil:
		return errors.New("timestamp is missing")
	case ev.Type == "":
		return errors.New("type is missing or empty")
	}
	t, _, _, ok := rfc3339.Parse(*in.Timestamp)
	if !ok {
		return fmt.Errorf("timestamp %q is not an RFC 3339 date-time", logging.Cut(*in.Timestamp, 40))
	}
	ev.Timestamp = t
	return nil
}

// ceHeader returns a ce-* header percent-decoded; a value that does not decode is returned as it is.
func ceHeader(h nats.Header, key string) string {
	v := h.Get(key)
	if d, err := url.PathUnescape(v); err == nil {
		return d
	}
	return v
}

// EventConsumerConfig configures an EventConsumer.
type EventConsumerConfig struct {
	// Prefix is the bridge's subject prefix; "" is DefaultPrefix.
	Prefix string
	// Stream is the events stream; "" is Subjects.EventsStream (PFX_EVENTS).
	Stream string
	// Types, when not empty, limits the consumer to events of these types (their subjects, by
	// TypeToken), events stored before the subject carried the unit included (Subjects.TypeFilters).
	// Units, when not empty, limits it to events of these loading units (by UnitToken; events stored
	// before the subject carried the unit have none, and are not among them). With both, the consumer
	// gets the events of those types that name those units. They set Consumer.FilterSubjects
	// (Subjects.EventFilters), and must be empty when the caller sets a filter. Without any, the filter
	// is P.events.>: the stream also holds the bridge's own markers.
	Types []string
	Units []string
	// Bind uses the durable consumer named Consumer.Durable as it is, without creating or updating it:
	// for a reader in another account than the bridge's, which may only fetch from, look up and
	// acknowledge a consumer an operator created for it (its JetStream handle made with
	// jetstream.NewWithAPIPrefix and the API prefix its account imports). Types, Units and the rest of
	// Consumer are then not used.
	Bind bool
	// Consumer is the JetStream consumer's configuration. With Durable set the consumer keeps its
	// position while nobody reads and is shared by every instance that uses the name (each event goes to
	// one of them); without, it is ephemeral and removed InactiveThreshold (default 5 s) after the last
	// read. DeliverPolicy chooses where a new consumer starts (DeliverAllPolicy: the first stored event).
	// AckPolicy is always explicit.
	Consumer jetstream.ConsumerConfig
	// ManualAck leaves acknowledging to Consume's handler (Event.Msg); by default Consume acknowledges
	// an event when the handler returns nil.
	ManualAck bool
	// RetryDelay is how long JetStream waits before redelivering an event whose handler returned an
	// error, in Consume; 0 means one second.
	RetryDelay time.Duration
	// Malformed, when set, is called by Consume for a message whose data is not a TrackingEvent; Consume
	// then terminates the message (JetStream does not deliver it again; it stays in the stream) and goes
	// on. Without it, Consume returns the *MalformedEventError and leaves the message unacknowledged.
	Malformed func(*MalformedEventError)
}

// EventConsumer reads tracking events from the events stream through a JetStream pull consumer.
// Next and Consume must not be called concurrently.
type EventConsumer struct {
	cfg  EventConsumerConfig
	cons jetstream.Consumer
	iter jetstream.MessagesContext
}

// NewEventConsumer creates (or, for a durable name that exists, updates) the JetStream consumer
// cfg describes on the events stream; with cfg.Bind it looks the durable up instead.
func NewEventConsumer(ctx context.Context, js jetstream.JetStream, cfg EventConsumerConfig) (*EventConsumer, error) {
	s := Subjects{Prefix: cfg.Prefix}
	if cfg.Stream == "" {
		cfg.Stream = s.EventsStream()
	}
	if cfg.Bind {
		if cfg.Consumer.Durable == "" {
			return nil, errors.New("tracking: event consumer: Bind needs the durable's name in Consumer.Durable")
		}
		cons, err := js.Consumer(ctx, cfg.Stream, cfg.Consumer.Durable)
		if err != nil {
			return nil, fmt.Errorf("tracking: event consumer %s on stream %s: %w", cfg.Consumer.Durable, cfg.Stream, err)
		}
		return &EventConsumer{cfg: cfg, cons: cons}, nil
	}
	cc := cfg.Consumer
	callerFilter := cc.FilterSubject != "" || len(cc.FilterSubjects) > 0
	byTypeOrUnit := len(cfg.Types) > 0 || len(cfg.Units) > 0
	switch {
	case byTypeOrUnit && callerFilter:
		return nil, errors.New("tracking: event consumer: give Types or Units, or a filter subject, not both")
	case byTypeOrUnit:
		cc.FilterSubjects = s.EventFilters(cfg.Types, cfg.Units)
	case !callerFilter:
		// The stream also holds the leaders' fence markers on P.leader
		// (docs/replicas.md#the-fence), which are not events.
		cc.FilterSubject = s.Events()
	}
	cc.AckPolicy = jetstream.AckExplicitPolicy
	cons, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream, cc)
	if err != nil {
		return nil, fmt.Errorf("tracking: event consumer on stream %s: %w", cfg.Stream, err)
	}
	return &EventConsumer{cfg: cfg, cons: cons}, nil
}

// Consumer returns the JetStream consumer, e.g. for its Info.
func (c *EventConsumer) Consumer() jetstream.Consumer { return c.cons }

// Next returns the next event, waiting for one until ctx is done. The caller acknowledges it through
// Event.Msg (unacknowledged, JetStream delivers it again after the consumer's AckWait). Data that is
// not a TrackingEvent gives a *MalformedEventError holding the message; the next call goes on after it.
func (c *EventConsumer) Next(ctx context.Context) (*Event, error) {
	if c.iter == nil {
		it, err := c.cons.Messages()
		if err != nil {
			return nil, fmt.Errorf("tracking: event consumer: %w", err)
		}
		c.iter = it
	}
	msg, err := c.iter.Next(jetstream.NextContext(ctx))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("tracking: event consumer: %w", err)
	}
	ev, err := DecodeEvent(msg.Subject(), msg.Headers(), msg.Data())
	if err != nil {
		var me *MalformedEventError
		if errors.As(err, &me) {
			me.Msg = msg
		}
		return nil, err
	}
	ev.Msg = msg
	return ev, nil
}

// Consume calls handle for each event until ctx is done, and then returns nil. handle's context continues
// the event's trace (ContinueTrace) when the bridge traces events. When handle returns nil
// the event is acknowledged (unless ManualAck); when it returns an error the event is delivered again
// after RetryDelay. A malformed event goes to Malformed, or ends Consume with its *MalformedEventError.
// Any other error ends Consume too. Consume calls Stop before it returns.
func (c *EventConsumer) Consume(ctx context.Context, handle func(context.Context, *Event) error) error {
	defer c.Stop() // fetch nothing more ahead once nobody reads
	delay := c.cfg.RetryDelay
	if delay <= 0 {
		delay = time.Second
	}
	for {
		ev, err := c.Next(ctx)
		var me *MalformedEventError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &me) && c.cfg.Malformed != nil:
			c.cfg.Malformed(me)
			if err := me.Msg.Term(); err != nil {
				return fmt.Errorf("tracking: terminating malformed event %q: %w", me.ID, err)
			}
			continue
		case err != nil:
			return err
		}
		if err := handle(ContinueTrace(ctx, ev.Msg.Headers()), ev); err != nil {
			if nerr := ev.Msg.NakWithDelay(delay); nerr != nil && ctx.Err() == nil {
				return fmt.Errorf("tracking: redelivering event %q: %w", ev.ID, nerr)
			}
			continue
		}
		if !c.cfg.ManualAck {
			if err := ev.Msg.Ack(); err != nil && ctx.Err() == nil {
				return fmt.Errorf("tracking: acknowledging event %q: %w", ev.ID, err)
			}
		}
	}
}

// Stop stops reading ahead; a later Next starts again. Events fetched but not handed out are delivered
// again after the consumer's AckWait. It does not delete the JetStream consumer: a durable one keeps its
// position for the next run.
func (c *EventConsumer) Stop() {
	if c.iter != nil {
		c.iter.Stop()
		c.iter = nil
	}
}
