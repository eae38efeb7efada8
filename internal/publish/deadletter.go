package publish

import (
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go"
)

// MaxErrorHeader bounds the Bridge-Error header of a dead letter.
const MaxErrorHeader = 4096

// dataPrefix is how many bytes of dropped data a dead letter's description keeps.
const dataPrefix = 256

// FitDeadLetter makes a dead letter fit the server's max_payload (max; 0 or less: no bound): when the
// message is larger, its data is replaced by a small JSON description (the reason, the id, the size and
// the first bytes of the data) and Bridge-Error says so. Without it the dead letter could never be
// stored, and what waits behind it would wait forever. It reports whether the data was replaced.
func FitDeadLetter(m *nats.Msg, max int64, id string) bool {
	if max <= 0 || int64(MsgSize(m)) <= max {
		return false
	}
	reason := m.Header.Get(HeaderError)
	m.Data, _ = json.Marshal(struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
		ID     string `json:"id,omitempty"`
		Size   int    `json:"size"`
		Prefix string `json:"data_prefix"`
	}{"dead letter larger than the NATS server's max_payload; its data was dropped", reason, id, len(m.Data),
		strings.ToValidUTF8(string(m.Data[:min(len(m.Data), dataPrefix)]), "\uFFFD")})
	m.Header.Set(HeaderError, Clip(reason+"; the data was dropped: the dead letter would exceed NATS max_payload", MaxErrorHeader))
	return true
}
