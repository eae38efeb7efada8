// Package units builds the units view: the key-value bucket PFX_UNITS that holds, under each loading
// unit's token, the data of that unit's latest event (docs/subjects.md#units-the-latest-event-per-loading-unit).
//
// The view is built from the events stream PFX_EVENTS, at least once, by every bridge that runs it: they
// share one durable pull consumer on P.events.>, and each event is acknowledged only after its bucket
// write is confirmed (or it was found not to change the view). A write is a compare-and-set on the key's
// revision (Nats-Expected-Last-Subject-Sequence), and an event replaces a value only when it is later:
// a larger timestamp as an instant, or on equal instants a larger event id, bytewise. So an event applied
// twice, by two bridges at once, or again in a rebuild, leaves the same view; a late event never moves a
// unit back; and a write that lost a race reads the key again and decides again.
//
// The view runs beside the event path and never stops it: it has its own NATS work, it retries what
// fails, and its state shows only in its metrics and status (View.Status). Rebuild starts it again from
// the stream's first event, with or without emptying the bucket first.
package units
