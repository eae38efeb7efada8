package publish

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"

	"github.com/nats-io/nats.go"
)

// MaxErrorHeader bounds the Bridge-Error header of a dead letter.
const MaxErrorHeader = 4096

// MaxHeaderBlock is the largest header block JetStream stores: it refuses a message with a larger one
// (error 10097), whatever the server's max_payload.
const MaxHeaderBlock = math.MaxUint16

// HeaderSize returns the size of m's header block as nats.go writes it.
func HeaderSize(m *nats.Msg) int { return MsgSize(m) - len(m.Data) }

const (
	dataPrefix     = 256  // bytes of the dropped data a description keeps
	droppedReason  = 1024 // bytes of the reason a description and its Bridge-Error keep
	droppedHeading = "dead letter larger than NATS stores (the server's max_payload or the stream's max_msg_size); its data was dropped"
)

// FitDeadLetter makes a dead letter fit the largest message NATS stores for it (max, see MaxMessage; 0 or
// less: no bound): when the message is larger, its data is replaced by a small JSON description (the
// reason, the id, the size and the first bytes of the data, or only the size if even that is too large)
// and Bridge-Error says so. Without it the dead letter could never be stored, and what waits behind it
// would wait forever. It reports whether the data was replaced.
func FitDeadLetter(m *nats.Msg, max int64, id string) bool {
	if max <= 0 || int64(MsgSize(m)) <= max {
		return false
	}
	reason := Clip(m.Header.Get(HeaderError), droppedReason)
	size := len(m.Data)
	m.Header.Set(HeaderError, reason+"; the data was dropped: the dead letter would exceed what NATS stores (max_payload or the stream's max_msg_size)")
	m.Data = describe(struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
		ID     string `json:"id,omitempty"`
		Size   int    `json:"size"`
		Prefix string `json:"data_prefix"`
	}{droppedHeading, reason, id, size, strings.ToValidUTF8(string(m.Data[:min(size, dataPrefix)]), "\uFFFD")})
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
