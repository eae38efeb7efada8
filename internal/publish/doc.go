// Package publish owns JetStream publishing of tracking events, and the event path under the lease. The
// upstream stream it reads and the events it hands on are internal/upstream's; the stream layout, the
// dead-letter headers and the size bounds come from internal/layout.
//
// # The walk of one event
//
// Publisher.Handle (publisher.go) takes one SSE event through four steps, one file each, in one
// direction. Each step owns its part of the publisher's state.
//
//  1. event.go reads the event: its data is scanned once (ScanEvent, in scan.go, with internal/jsonscan),
//     its id is chosen (the SSE id, else the JSON "id", else a digest of the data) in the form it travels
//     in headers (HeaderID), its type token taken (subject.go) and its unit token read in the same scan,
//     and its place in the stream noted.
//     cursor.go then says whether it is stored already, beyond the resume point (after a restart or a
//     reconnect, the upstream replays such events): nothing is sent for it.
//  2. message.go builds its message: the subject P.events.<TYPE>.<UNIT> and every header (ids, type, the
//     CloudEvents attributes, Bridge-Resume-After, the fence's check); or, when the data is not a JSON
//     object or too large for the stream, a dead letter for P.dlq.events that stands for it.
//  3. send.go adds the entry to the window, the events in flight in publish order, and publishes the
//     message asynchronously, with a reply subject that names the entry.
//  4. acks.go takes JetStream's answers: the reply handler records each entry's outcome, and entries leave
//     the window's front in publish order once stored, moving the resume point (cursor.go's state).
//
// Before step 1, Handle waits while the window is full: that is step 4 for earlier events. A failed or
// unanswered publish is sent again with the same Nats-Msg-Id (recover.go), after looking the events
// stream up for it (tail.go).
//
// Around the walk: options.go (Config, Observer, the dead-letter reasons), cursor.go (the resume cursor,
// read from the events stream by the first Resume, and the events to skip), fence.go (Claim, the markers
// that fence a former leader out, and restart directives), errors.go (sentinel errors).
//
// # The event path under the lease
//
// Events (leader.go) is the event path as the daemon runs it, a component: it holds the upstream stream
// and the lease, and each time this bridge starts leading, a term begins with a Publisher of its own:
// Claim, then the upstream stream runs into Handle until the lease says stop, and the term's publishes
// in flight are settled before the lease is released. command.go has the operator's commands on the same
// path: ShowCursor and RestartCursor.
package publish
