package layout

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// Headers of dead letters (docs/subjects.md#dead-letters).
const (
	// HeaderError says why the message was dead-lettered; every dead letter carries it.
	HeaderError = "Bridge-Error"
	// HeaderUpstreamStatus is the HTTP status of the upstream's answer to a report, when it answered.
	HeaderUpstreamStatus = "Bridge-Upstream-Status"
	// HeaderReportSequence is a report's sequence number in the reports stream.
	HeaderReportSequence = "Bridge-Report-Sequence"
	// HeaderReportTime is when a report was stored in the reports stream (RFC 3339, UTC).
	HeaderReportTime = "Bridge-Report-Time"
	// HeaderDeliveries is the number of times a report had been delivered to the consumer.
	HeaderDeliveries = "Bridge-Deliveries"
	// HeaderOriginalPrefix renames the original message's headers that JetStream would act on (those
	// starting with "Nats-", such as Nats-Msg-Id or Nats-TTL), and those that would pass for the bridge's
	// own ("Bridge-", in any case), when they are copied to a dead letter.
	HeaderOriginalPrefix = "Bridge-Original-"
)

// OriginalKey is the name under which an original message's header k is copied to a dead letter:
// JetStream acts on Nats-*, and readers trust Bridge-* as the bridge's own (a producer could plant a
// "bridge-error: accepted" beside the real one), so both are renamed with HeaderOriginalPrefix, whatever
// their case; any other name is kept.
func OriginalKey(k string) string {
	if len(k) >= 5 && strings.EqualFold(k[:5], "Nats-") || len(k) >= 7 && strings.EqualFold(k[:7], "Bridge-") {
		return HeaderOriginalPrefix + k
	}
	return k
}

// MaxErrorHeader bounds the Bridge-Error header of a dead letter.
const MaxErrorHeader = 4096

// DataPrefix is how many bytes of the dropped data a description made by Fit keeps (data_prefix).
const DataPrefix = 256

const (
	droppedReason  = 1024 // bytes of the reason a description and its Bridge-Error keep
	droppedHeading = "dead letter larger than NATS stores (the server's max_payload or the stream's max_msg_size); its data was dropped"
)

// Fit makes a dead letter fit the largest message NATS stores for it (max, see MaxMessage; 0 or
// less: no bound): when the message is larger, its data is replaced by a small JSON description (the
// reason, the id, the size and the first bytes of the data, or only the size if even that is too large)
// and Bridge-Error says so. Without it the dead letter could never be stored, and what waits behind it
// would wait forever. It reports whether the data was replaced.
func Fit(m *nats.Msg, max int64, id string) bool {
	if max <= 0 || int64(MsgSize(m)) <= max {
		return false
	}
	reason := logging.Clip(m.Header.Get(HeaderError), droppedReason)
	size := len(m.Data)
	m.Header.Set(HeaderError, reason+"; the data was dropped: the dead letter would exceed what NATS stores (max_payload or the stream's max_msg_size)")
	m.Data = describe(struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
		ID     string `json:"id,omitempty"`
		Size   int    `json:"size"`
		Prefix string `json:"data_prefix"`
	}{droppedHeading, reason, id, size, strings.ToValidUTF8(string(m.Data[:min(size, DataPrefix)]), "\uFFFD")})
	if int64(MsgSize(m)) > max {
		m.Data = describe(struct {
			Error string `json:"error"`
			Size  int    `json:"size"`
		}{droppedHeading, size})
	}
	return true
}

// describe encodes a description as compact JSON, without HTML escaping (which would triple "<").
func describe(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // plain strings and ints: cannot fail
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
