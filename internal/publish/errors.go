package publish

import "errors"

// ErrNotObject is returned (wrapped, with the kind of value found) by ScanEvent for data that is valid
// JSON but whose top-level value is not an object. Test for it with errors.Is.
var ErrNotObject = errors.New("not a JSON object")

// errAckTimeout is the outcome of a publish whose acknowledgement did not arrive within Config.Timeout:
// ambiguous (the message may be stored), so it is sent again with the same Nats-Msg-Id.
var errAckTimeout = errors.New("no acknowledgement from JetStream in time")

// errBadAck is the outcome of a reply that is neither a PubAck nor a JetStream error.
var errBadAck = errors.New("invalid JetStream acknowledgement")

// errFoundStored marks a failed publish that settleStored found in the events stream.
var errFoundStored = errors.New("found stored")
