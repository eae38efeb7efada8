package publish

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

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

// StreamMaxMsgSize returns the max_msg_size of the named stream (0: no bound).
func StreamMaxMsgSize(ctx context.Context, js jetstream.JetStream, name string) (int64, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	return max(int64(s.CachedInfo().Config.MaxMsgSize), 0), nil
}
