package consume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A report whose header block the NATS client cannot decode (a line without a colon, say) reaches the
// consumer without any headers: nats.go drops the block and records nats.ErrBadHeaderMsg as the
// connection's last error. While that error stands, the consumer reads the stored copy of each report
// without headers, whose header block the JetStream API returns raw, and dead-letters a report whose block
// is malformed, with the header lines that could be read, instead of sending it upstream without them.

// malformedHeader returns, for a report delivered without headers whose stored header block is malformed,
// the lines of it that could be read and the reason for its dead letter. ok is false for every other
// report, and when the stored copy cannot be read (then the report goes on as it is).
func (c *Consumer) malformedHeader(msg jetstream.Msg, meta *jetstream.MsgMetadata) (hdr nats.Header, reason string, ok bool) {
	if len(msg.Headers()) != 0 || !errors.Is(c.js.Conn().LastError(), nats.ErrBadHeaderMsg) {
		return nil, "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opTimeout)
	raw, err := c.storedHeader(ctx, meta.Stream, meta.Sequence.Stream)
	cancel()
	if err != nil {
		c.log.Warn("a report arrived without headers and its stored copy could not be read; sending it as it is",
			"seq", meta.Sequence.Stream, "err", err)
		return nil, "", false
	}
	if len(raw) == 0 {
		return nil, "", false // it has none
	}
	if _, err := nats.DecodeHeadersMsg(raw); err == nil {
		return nil, "", false // an empty block: nothing was lost
	}
	hdr, problem := readHeaderLines(raw)
	return hdr, fmt.Sprintf("the report's NATS header block could not be decoded (stream sequence %d): %s; "+
		"%d well-formed header line(s) kept", meta.Sequence.Stream, problem, len(hdr)), true
}

// storedHeader returns the raw header block of a stored message, read with the JetStream API's message get
// (not the direct get, whose answer the client would decode).
func (c *Consumer) storedHeader(ctx context.Context, stream string, seq uint64) ([]byte, error) {
	req, err := json.Marshal(struct {
		Seq uint64 `json:"seq"`
	}{seq})
	if err != nil {
		return nil, err
	}
	subj := apiPrefix(c.js.Options()) + "STREAM.MSG.GET." + stream
	resp, err := c.js.Conn().RequestWithContext(ctx, subj, req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", subj, err)
	}
	var r struct {
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Header []byte `json:"hdrs"`
		} `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", subj, err)
	}
	switch {
	case r.Error != nil:
		return nil, fmt.Errorf("%s: %s (%d)", subj, r.Error.Description, r.Error.Code)
	case r.Message == nil:
		return nil, fmt.Errorf("%s: answer without a message", subj)
	}
	return r.Message.Header, nil
}

// apiPrefix is the JetStream API prefix of opts, with its trailing dot.
func apiPrefix(opts jetstream.JetStreamOptions) string {
	switch {
	case opts.APIPrefix != "":
		return strings.TrimSuffix(opts.APIPrefix, ".") + "."
	case opts.Domain != "":
		return "$JS." + opts.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}

// readHeaderLines reads a raw header block as far as it can: the "Key: value" lines after the
// NATS/1.0 line, and a description of the first line that is not one.
func readHeaderLines(raw []byte) (nats.Header, string) {
	lines := strings.Split(strings.TrimRight(string(raw), "\r\n"), "\r\n")
	hdr := nats.Header{}
	var problems []string
	if !strings.HasPrefix(lines[0], "NATS/1.0") {
		problems = append(problems, fmt.Sprintf("line 1 %s is not NATS/1.0", quoteLine(lines[0])))
	}
	for i, line := range lines[1:] {
		k, v, ok := strings.Cut(line, ":")
		if k = strings.TrimSpace(k); !ok || k == "" {
			problems = append(problems, fmt.Sprintf("line %d %s is not \"Key: value\"", i+2, quoteLine(line)))
			continue
		}
		hdr[k] = append(hdr[k], strings.TrimSpace(v))
	}
	switch len(problems) {
	case 0:
		return hdr, "unreadable"
	case 1:
		return hdr, problems[0]
	}
	return hdr, fmt.Sprintf("%s (and %d more)", problems[0], len(problems)-1)
}

// quoteLine quotes a header line for a reason, shortened.
func quoteLine(s string) string {
	const maxLen = 80
	if len(s) > maxLen {
		return fmt.Sprintf("%q…", s[:maxLen])
	}
	return fmt.Sprintf("%q", s)
}

// recoveredHeaders is a report with the headers read from its stored copy in place of its own (none).
type recoveredHeaders struct {
	jetstream.Msg
	hdr nats.Header
}

func (m recoveredHeaders) Headers() nats.Header { return m.hdr }
