package layout

import (
	"errors"
	"math"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxHeaderBlock is the largest header block JetStream stores: it refuses a message with a larger one
// (error 10097), whatever the server's max_payload.
const MaxHeaderBlock = math.MaxUint16

// HeaderSize returns the size of m's header block as nats.go writes it.
func HeaderSize(m *nats.Msg) int { return MsgSize(m) - len(m.Data) }

// TooLarge reports whether a publish failed because the message is larger than NATS accepts: larger than
// the server's max_payload (refused by the client) or than the stream's max_msg_size (refused by
// JetStream). Sending it again cannot succeed; it must become a (smaller) dead letter.
func TooLarge(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, nats.ErrMaxPayload) ||
		errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

// MaxMessage returns the largest message (headers and data) a stream stores, given the server's
// max_payload and the stream's max_msg_size; a value of 0 or less is no bound, and so is the result.
func MaxMessage(maxPayload, maxMsgSize int64) int64 {
	if maxMsgSize > 0 && (maxPayload <= 0 || maxMsgSize < maxPayload) {
		return maxMsgSize
	}
	return maxPayload
}

// MsgSize returns the size of m as the server counts it against max_payload: the header block as nats.go
// writes it, plus the data.
func MsgSize(m *nats.Msg) int {
	n := len(m.Data)
	if len(m.Header) == 0 {
		return n
	}
	n += len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}
