package publish

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// ErrFenced is the error of Handle and Resume once JetStream refused an event because another leader
// stored its markers (docs/replicas.md#the-fence): this publisher must stop, and its process
// must stop leading. The Publisher is of no further use.
var ErrFenced = errors.New("fenced out: another bridge took over the events stream")

// FenceWidth is the number of fence subjects, P.leader.0 … P.leader.<FenceWidth-1>, and so the most
// events a fenced publisher has in flight. Every event checks the subject of its window entry (its
// sequence number modulo FenceWidth), so no two events in flight check the same subject: on a replicated
// stream JetStream refuses a second check on a subject while the first is being applied (10164), which
// would otherwise allow one event in flight at a time. Every new leader stores a marker on each subject.
const FenceWidth = 1024

// Headers of a marker on the fence subjects, and of a restart directive on P.leader.restart, which
// `bridge cursor restart` stores after a full set of markers: the next leader resumes the upstream stream
// after HeaderRestartAfter, or from its beginning, instead of after the last stored event.
const (
	HeaderLeader       = "Bridge-Leader"        // the marker's writer: a holder's name, or "operator"
	HeaderLeaderTerm   = "Bridge-Leader-Term"   // a leader's markers: the term that stored them (Claim's random id)
	HeaderRestart      = "Bridge-Restart"       // "after" or "beginning"
	HeaderRestartAfter = "Bridge-Restart-After" // the id, in header form (HeaderID), with "after"
)

// Values of HeaderRestart.
const (
	RestartAfter     = "after"
	RestartBeginning = "beginning"
	restartTaken     = "taken" // a leader took the directive before it (see Publisher.takeDirective)
)

// fence is the check every event of a leader carries: the last message on the fence subject of its
// window entry is still the marker this leader stored there. Empty: not fenced.
type fence struct {
	subjects []string // P.leader.<j>
	seqs     []string // the stream sequence of this leader's marker on subjects[j], as the header carries it
	// For keepFence: the lowest of the markers' sequences, when they were stored, and what they carry.
	oldest uint64
	at     time.Time
	leader string
	term   string // HeaderLeaderTerm of this term's markers: tells its own from another leader's of one name
	body   []byte
	// For reclaim: the events stream, looked up once; foreign writes' log lines, one a minute.
	stream jetstream.Stream
	log    *logging.Limiter
	// For sweep: the sequence of the newest message on P.leader.> this leader knows of (its own, or
	// one sweep looked at already); again when the last sweep left a subject to the next one (it was
	// written to while being claimed, or the sweep failed), which this leader's own markers since must
	// not hide.
	known uint64
	again bool
}

func (f *fence) on() bool { return len(f.subjects) > 0 }

// check returns the fence subject and marker sequence the entry with sequence number seq checks.
func (f *fence) check(seq uint64) (subject, markerSeq string) {
	j := seq % uint64(len(f.subjects))
	return f.subjects[j], f.seqs[j]
}

// fenceSubject returns P.leader.<j>.
func fenceSubject(base string, j int) string { return base + "." + strconv.Itoa(j) }

// restartSubject returns P.leader.restart, where restart directives go.
func restartSubject(base string) string { return base + ".restart" }

// Claim stores this leader's markers on the fence subjects (Config.FenceSubject.<j>) and makes every later
// event conditional on them: once another leader stores its own, JetStream refuses this publisher's
// events, and Handle returns ErrFenced. Call it once, before the first Resume, after acquiring the lease:
// a former leader's event stored before the markers is then counted by the cursor Resume reads, and one
// arriving after them is refused. leader names the holder in the markers (HeaderLeader) and body is
// stored as the first marker's data.
func (p *Publisher) Claim(ctx context.Context, leader string, body []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.FenceSubject == "" {
		return errors.New("publish: Claim without Config.FenceSubject")
	}
	at := time.Now()
	term := nuid.Next()
	seqs, _, err := storeMarkers(ctx, p.js, p.cfg.EventsStream, p.cfg.FenceSubject, headerValue(leader), term, body, nil)
	if err != nil {
		return err
	}
	f := fence{subjects: make([]string, FenceWidth), seqs: make([]string, FenceWidth),
		leader: headerValue(leader), term: term, body: body, log: logging.NewLimiter(time.Minute, nil)}
	for j := range FenceWidth {
		f.subjects[j] = fenceSubject(p.cfg.FenceSubject, j)
	}
	f.stored(seqs, at)
	p.fence = f
	p.win.limit = min(len(p.win.ring), FenceWidth)
	p.log.Info("fence claimed", "subjects", p.cfg.FenceSubject+".>", "first_seq", seqs[0], "last_seq", seqs[FenceWidth-1])
	return nil
}

// stored records the sequences of a set of markers stored at (or just after) at.
func (f *fence) stored(seqs []uint64, at time.Time) {
	f.oldest, f.at = seqs[0], at
	for j, seq := range seqs {
		f.seqs[j] = strconv.FormatUint(seq, 10)
		f.oldest = min(f.oldest, seq)
		f.known = max(f.known, seq)
	}
}

// set records marker seq as the one on fence subject j.
func (f *fence) set(j int, seq uint64) {
	f.seqs[j] = strconv.FormatUint(seq, 10)
	f.known = max(f.known, seq)
}

// keepFence stores this leader's markers again before the events stream's limits can remove them: a
// stream that discards its oldest messages (max_bytes, max_msgs, max_age) would otherwise remove them in
// a long term, after which every event's check fails and the term ends (ErrFenced), with a replay of the
// events in flight. It acts when the markers are older than half the stream's max_age, or when the stream
// is more than half full and the markers sit in its older half; so after each renewal half the stream
// turns over before the next. Every event in flight settles first (one checking a marker being replaced
// would be refused), and each new marker is stored on condition that the subject's last message is still
// this leader's, so a renewal never replaces another leader's marker. Run calls it every second (one
// look-up of the stream's state, made by fenceStreamInfo before p.mu is taken), with p.mu held.
func (p *Publisher) keepFence(ctx context.Context, info *jetstream.StreamInfo, infoErr error) error {
	if !p.fence.on() {
		return nil
	}
	if infoErr != nil {
		return infoErr
	}
	c, st := info.Config, info.State
	aging := c.MaxAge > 0 && time.Since(p.fence.at) > c.MaxAge/2
	full := c.MaxBytes > 0 && st.Bytes > uint64(c.MaxBytes)/2 || c.MaxMsgs > 0 && st.Msgs > uint64(c.MaxMsgs)/2
	if !aging && !(full && p.fence.oldest < st.FirstSeq+(st.LastSeq-st.FirstSeq)/2) {
		return nil
	}
	for p.win.n > 0 {
		if err := p.settleFront(ctx); err != nil {
			return err
		}
	}
	expect := make([]uint64, FenceWidth)
	for j, seq := range p.fence.seqs {
		expect[j], _ = strconv.ParseUint(seq, 10, 64)
	}
	at := time.Now()
	seqs, conflicts, err := storeMarkers(ctx, p.js, p.cfg.EventsStream, p.cfg.FenceSubject, p.fence.leader, p.fence.term, p.fence.body, expect)
	if err != nil {
		// Some markers may be stored anew: the events checking their subjects will be refused, and the
		// term ends as if fenced out, which is safe. Another leader's marker makes the same happen.
		return fmt.Errorf("renewing the fence markers: %w", err)
	}
	// A subject whose last message is not this leader's marker: another client's write there is
	// claimed again; another leader's marker ends the term at the next event checking it.
	for _, j := range conflicts {
		seq, err := p.reclaimSubject(ctx, j)
		if err != nil {
			return fmt.Errorf("renewing the fence marker on %s: %w", p.fence.subjects[j], err)
		}
		seqs[j] = seq
	}
	p.fence.stored(seqs, at)
	p.log.Info("fence markers stored again ahead of the events stream's limits", "first_seq", seqs[0],
		"stream_first_seq", st.FirstSeq, "stream_bytes", st.Bytes, "max_bytes", c.MaxBytes, "max_age", c.MaxAge.String())
	return nil
}

// fenceStreamInfo reads the events stream's configuration and state for keepFence; nil, nil while no
// fence is claimed. p.mu is held only to look at the fence, not during the round trip.
func (p *Publisher) fenceStreamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	p.mu.Lock()
	on := p.fence.on()
	p.mu.Unlock()
	if !on {
		return nil, nil
	}
	s, err := p.js.Stream(ctx, p.cfg.EventsStream)
	if err != nil {
		return nil, fmt.Errorf("events stream %s: %w", p.cfg.EventsStream, err)
	}
	return s.CachedInfo(), nil
}

// rollup is the header set of every message on the fence subjects: a subject rollup, with which JetStream
// removes the subject's earlier messages once it stores this one. Each subject then holds only its latest
// marker (or directive), so the events stream holds at most FenceWidth markers and one directive however
// often the leader changes. The fence's check is unaffected: it asks that the subject's last message be a
// given marker, and a rollup removes only messages before the last.
func rollup(h nats.Header) nats.Header {
	h.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	return h
}

// storeMarkers stores a marker on each fence subject, asynchronously, and returns their sequences. With
// expect, the marker on subject j is stored only if the subject's last message is at expect[j]; the
// subjects where it is not are returned in conflicts (their sequence 0), for the caller to look at.
func storeMarkers(ctx context.Context, js jetstream.JetStream, stream, base, leader, term string, body []byte,
	expect []uint64) (seqs []uint64, conflicts []int, err error) {
	futures := make([]jetstream.PubAckFuture, FenceWidth)
	for j := range FenceWidth {
		opts := []jetstream.PublishOpt{jetstream.WithExpectStream(stream)}
		if expect != nil {
			opts = append(opts, jetstream.WithExpectLastSequencePerSubject(expect[j]))
		}
		f, err := js.PublishMsgAsync(markerMsg(base, j, leader, term, body), opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("storing the fence markers on %s.>: %w", base, err)
		}
		futures[j] = f
	}
	seqs = make([]uint64, FenceWidth)
	for j, f := range futures {
		select {
		case ack := <-f.Ok():
			seqs[j] = ack.Sequence
		case err := <-f.Err():
			if expect != nil && wrongLastSequence(err) {
				conflicts = append(conflicts, j)
				continue
			}
			return nil, nil, fmt.Errorf("storing the fence markers on %s.>: %w", base, err)
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("storing the fence markers on %s.>: %w", base, ctx.Err())
		}
	}
	return seqs, conflicts, nil
}

// markerMsg returns a leader's marker on fence subject j: the first carries body (the holder). term is
// HeaderLeaderTerm's value, "" for none (an operator's markers).
func markerMsg(base string, j int, leader, term string, body []byte) *nats.Msg {
	m := &nats.Msg{Subject: fenceSubject(base, j), Header: rollup(nats.Header{HeaderLeader: {leader}})}
	if term != "" {
		m.Header[HeaderLeaderTerm] = []string{term}
	}
	if j == 0 {
		m.Data = body
	}
	return m
}

// wrongLastSequence reports whether err is JetStream refusing a write whose expected last sequence on its
// subject was not the subject's last.
func wrongLastSequence(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// storeRestart stores a full set of markers on the fence subjects, which fences the leader in office out of
// the events stream, then a restart directive on P.leader.restart: the next leader resumes the upstream
// stream after the id (beginning false) or from its beginning. It never touches the stream otherwise. It
// returns the sequences of the operator's first marker and of the directive. Only RestartCursor calls
// it, holding the lease, and confirms afterwards that no bridge read its cursor before the directive
// (withdrawRestart otherwise).
func storeRestart(ctx context.Context, js jetstream.JetStream, stream, fenceBase, after string, beginning bool) (first, seq uint64, err error) {
	if err := CheckRestart(after, beginning); err != nil {
		return 0, 0, err
	}
	h := rollup(nats.Header{HeaderLeader: {"operator"}, HeaderRestart: {RestartBeginning}})
	if !beginning {
		h.Set(HeaderRestart, RestartAfter)
		h.Set(HeaderRestartAfter, HeaderID(after))
	}
	seqs, _, err := storeMarkers(ctx, js, stream, fenceBase, "operator", "", nil, nil)
	if err != nil {
		return 0, 0, err
	}
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: restartSubject(fenceBase), Header: h}, jetstream.WithExpectStream(stream))
	if err != nil {
		return 0, 0, fmt.Errorf("storing the restart directive on %s: %w", restartSubject(fenceBase), err)
	}
	return slices.Min(seqs), ack.Sequence, nil
}

// leaderCrossed returns an error wrapping ErrLeaderCrossed when a leader's marker (a term's) is among the
// messages on P.leader.> from the operator's first marker to its directive (from and to, the stream
// sequences). Each fence subject keeps only its last message, so such a marker came after the operator's
// on its subject: that leader holds the subject, and it may have read its cursor before the directive
// was stored. The leader that stepped down leaves such a marker when it was claiming the fence just as the
// operator seized the lease.
func leaderCrossed(ctx context.Context, js jetstream.JetStream, stream, fenceBase string, from, to uint64) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("events stream %s: %w", stream, err)
	}
	msgs, err := (&tailReader{s: s, filter: fenceBase + ".>"}).read(ctx, from, to)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Header.Get(HeaderLeaderTerm) != "" {
			// The name is a header any client in the account could have written: bounded, made printable.
			return fmt.Errorf("%w: %s's marker at sequence %d", ErrLeaderCrossed,
				logging.Value(m.Header.Get(HeaderLeader), 64), m.seq)
		}
	}
	if len(msgs) == 0 || msgs[len(msgs)-1].seq != to {
		return fmt.Errorf("reading %s.> up to the restart directive at sequence %d: the stream did not get there", fenceBase, to)
	}
	return nil
}

// ErrLeaderCrossed is leaderCrossed's finding: a leader's marker came after the operator's on a fence
// subject.
var ErrLeaderCrossed = errors.New("a leader claimed the fence in the middle of the restart")

// withdrawRestart records the directive at seq as no longer pending, on condition that it is still
// P.leader.restart's last message: the record a leader stores when it takes one. taken is true when a
// leader took it first (its record is there), so the restart takes place; ErrRestartSuperseded when
// another directive followed it.
func withdrawRestart(ctx context.Context, js jetstream.JetStream, stream, fenceBase string, seq uint64) (taken bool, err error) {
	subject := restartSubject(fenceBase)
	rec := &nats.Msg{Subject: subject, Header: rollup(nats.Header{HeaderRestart: {restartTaken}})}
	_, err = js.PublishMsg(ctx, rec, jetstream.WithExpectStream(stream), jetstream.WithExpectLastSequencePerSubject(seq))
	if err == nil || !wrongLastSequence(err) {
		return false, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return false, err
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return false, err
	}
	switch m.Header.Get(HeaderRestart) {
	case restartTaken:
		return true, nil
	case RestartAfter, RestartBeginning:
		return false, ErrRestartSuperseded
	}
	return false, fmt.Errorf("%s holds a message of another client after the directive: cannot tell whether a leader took it", subject)
}

// ErrRestartSuperseded is withdrawRestart's finding that another restart directive (another operator's)
// followed the one it was to withdraw: that one stands instead.
var ErrRestartSuperseded = errors.New("another restart directive (another operator's) followed this one and stands instead")

// CheckRestart reports what is wrong with a restart request, before anything is written: an id is
// needed unless the restart is from the beginning, and it must be one HTTP can send as Last-Event-ID.
func CheckRestart(after string, beginning bool) error {
	switch {
	case beginning:
		return nil
	case after == "":
		return errors.New("an event id to restart after is required")
	case !upstream.Resumable(after):
		return fmt.Errorf("the id %q cannot be sent back as Last-Event-ID (control characters or edge white space)", after)
	}
	return nil
}

// restartDirective returns the resume point a restart directive names, in header form ("" for the
// beginning); ok is false for a message without a usable one.
func restartDirective(h nats.Header) (after string, ok bool) {
	switch h.Get(HeaderRestart) {
	case RestartBeginning:
		return "", true
	case RestartAfter:
		v := h.Get(HeaderRestartAfter)
		return v, v != ""
	}
	return "", false
}

// fencedOut reports whether the entry's publish was refused by the fence: its check on a fence subject
// failed because another message was stored there since this leader's marker. (A check refused while
// another on the same subject is being applied, 10164, is sent again like any refusal.)
func (p *Publisher) fencedOut(e *pending) bool {
	return p.fence.on() && e.dead == nil && wrongLastSequence(e.err)
}

// errTakenOver is reclaimSubject's finding that a fence subject holds another leader's marker (or an
// operator's), or that this process no longer holds the lease: the term is over.
var errTakenOver = errors.New("another bridge took over")

// errReclaimed marks an entry refused by a foreign write on its fence subject, which reclaim has since
// claimed again: it was not stored, and is sent again at once.
var errReclaimed = errors.New("refused by another client's write on its fence subject, claimed again since")

// reclaim answers an event refused by the fence. Another leader's marker on its fence subject ends the
// term (ErrFenced). But anything else stored there was written by a client that is no bridge: in a NATS
// account shared with clients, JetStream stores its acknowledgement of any client's publish on the reply
// subject that client chose, a fence subject included. Such a write must not end the term, or any client
// could stop the events; so once the lease (read now from its bucket) shows that no bridge took over,
// the subject is claimed again and the event is sent again (errReclaimed).
//
// While the subject or the lease cannot be read (NATS busy or away), nothing is decided: the event waits,
// and the reads are tried again with a backoff, until they answer or the term ends (the lease stops it
// by its own clock, which ends ctx).
func (p *Publisher) reclaim(ctx context.Context, e *pending) error {
	j := int(e.seq % uint64(len(p.fence.subjects)))
	for attempt := 0; ; attempt++ {
		seq, err := p.reclaimSubject(ctx, j)
		switch {
		case err == nil:
			p.fence.set(j, seq)
			e.err = errReclaimed
			return nil
		case errors.Is(err, errTakenOver):
			return p.errFenced(e)
		case ctx.Err() != nil:
			return ctx.Err()
		}
		if ok, held := p.fence.log.Allow("undecided"); ok {
			p.log.Warn("cannot tell another leader's fence marker from another client's write yet; the event waits",
				"fence_subject", p.fence.subjects[j], "event_id", e.id, "err", err, "not_logged_since", held)
		}
		if !retry.Sleep(ctx, retry.Backoff(100*time.Millisecond, 2*time.Second, attempt)) {
			return ctx.Err()
		}
	}
}

// reclaimSubject stores this leader's marker again on fence subject j, whose last message is not its own,
// and returns the marker's sequence, on these conditions: that last message is no bridge's marker (those
// carry HeaderLeader), this process still holds the lease (Config.Confirm, read from the bucket after
// the message), and the marker is stored only while that message is still the subject's last. A leader
// that took over after the check stores its markers after it, so the new marker never lets a former
// leader's events through behind a newer leader's back; a marker stored just before another leader's is
// replaced by it, as in any takeover. errTakenOver when a condition fails.
func (p *Publisher) reclaimSubject(ctx context.Context, j int) (uint64, error) {
	if p.cfg.Confirm == nil {
		return 0, errTakenOver
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	subject := p.fence.subjects[j]
	if p.fence.stream == nil {
		s, err := p.js.Stream(ctx, p.cfg.EventsStream)
		if err != nil {
			return 0, fmt.Errorf("events stream %s: %w", p.cfg.EventsStream, err)
		}
		p.fence.stream = s
	}
	for range reclaimAttempts {
		m, err := p.fence.stream.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return 0, fmt.Errorf("reading the last message on %s: %w", subject, err)
		}
		if m.Header.Get(HeaderLeader) != "" {
			if p.ownMarker(m, j) {
				return m.Sequence, nil // this term's own marker, newer than the one checked
			}
			return 0, errTakenOver
		}
		held, err := p.cfg.Confirm(ctx)
		if err != nil {
			return 0, fmt.Errorf("reading the lease: %w", err)
		}
		if !held {
			return 0, errTakenOver
		}
		var body []byte
		if j == 0 {
			body = p.fence.body
		}
		ack, err := p.js.PublishMsg(ctx, markerMsg(p.cfg.FenceSubject, j, p.fence.leader, p.fence.term, body),
			jetstream.WithExpectStream(p.cfg.EventsStream), jetstream.WithExpectLastSequencePerSubject(m.Sequence))
		if err == nil {
			p.foreignWrite(subject, m)
			return ack.Sequence, nil
		}
		if !wrongLastSequence(err) {
			return 0, fmt.Errorf("storing the fence marker on %s again: %w", subject, err)
		}
		// Another write got in since the read: look again.
	}
	return 0, fmt.Errorf("%s kept changing while being claimed again", subject)
}

// ownMarker reports whether m, the last message on fence subject j and a marker, is this term's: the one
// recorded, or one stored since whose acknowledgement never came back (a publish that timed out on a busy
// server and was stored all the same). Another leader's markers carry another term, even under the same
// name (two bridges on one host).
func (p *Publisher) ownMarker(m *jetstream.RawStreamMsg, j int) bool {
	return strconv.FormatUint(m.Sequence, 10) == p.fence.seqs[j] ||
		p.fence.term != "" && m.Header.Get(HeaderLeaderTerm) == p.fence.term
}

// sweep removes what other clients wrote on P.leader.>: without it, messages a client keeps writing on a
// fence subject no event happens to check, or on P.leader.restart, would pile up there without bound
// (JetStream's acknowledgements of a flood of a client's publishes, aimed there), fill the events
// stream and push its events out. Run calls it every second with p.mu held. It reads the newest message
// on P.leader.> (one request); only when it is newer than what this leader knows, or the last sweep left
// a subject to this one, does it look at every subject there, settle the events in flight, and claim again each fence subject holding more than its
// marker (reclaimSubject, with its conditions), and record P.leader.restart's directive as taken
// (sweepRestart). Another leader's marker found there is left for the next event to meet (ErrFenced).
func (p *Publisher) sweep(ctx context.Context) error {
	if !p.fence.on() || p.cfg.Confirm == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	if p.fence.stream == nil {
		s, err := p.js.Stream(rctx, p.cfg.EventsStream)
		if err != nil {
			return fmt.Errorf("events stream %s: %w", p.cfg.EventsStream, err)
		}
		p.fence.stream = s
	}
	newest, err := p.fence.stream.GetLastMsgForSubject(rctx, p.cfg.FenceSubject+".>")
	if err != nil || newest.Sequence <= p.fence.known && !p.fence.again {
		return err
	}
	p.fence.again = true // until this sweep has looked at every subject and left none to the next
	left := false
	info, err := p.fence.stream.Info(rctx, jetstream.WithSubjectFilter(p.cfg.FenceSubject+".>"))
	if err != nil {
		return fmt.Errorf("events stream %s: %w", p.cfg.EventsStream, err)
	}
	for p.win.n > 0 { // an event checking a marker about to be replaced would be refused
		if err := p.settleFront(ctx); err != nil {
			return err
		}
	}
	restart := restartSubject(p.cfg.FenceSubject)
	// The last message of each subject that holds more than its marker, then the lease, then a marker
	// on each, on condition that that message is still the subject's last: reclaimSubject's conditions,
	// with one lease read for all of them.
	type pile struct {
		j    int
		last *jetstream.RawStreamMsg
	}
	var piles []pile
	for subject, n := range info.State.Subjects {
		if n < 2 {
			continue
		}
		if subject == restart {
			again, err := p.sweepRestart(ctx)
			if err != nil {
				return err
			}
			left = left || again
			continue
		}
		j, ok := fenceIndex(p.cfg.FenceSubject, subject)
		if !ok {
			continue // not a subject the bridge writes (left to the stream's limits)
		}
		gctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
		m, err := p.fence.stream.GetLastMsgForSubject(gctx, subject)
		cancel()
		if err != nil {
			return fmt.Errorf("reading the last message on %s: %w", subject, err)
		}
		if m.Header.Get(HeaderLeader) != "" {
			if !p.ownMarker(m, j) {
				return nil // another leader's marker: the next event checking it ends the term
			}
			p.fence.set(j, m.Sequence)
			continue
		}
		piles = append(piles, pile{j, m})
	}
	if len(piles) > 0 {
		cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
		held, err := p.cfg.Confirm(cctx)
		cancel()
		if err != nil || !held {
			return err
		}
		futures := make([]jetstream.PubAckFuture, len(piles))
		for i, pl := range piles {
			var body []byte
			if pl.j == 0 {
				body = p.fence.body
			}
			f, err := p.js.PublishMsgAsync(markerMsg(p.cfg.FenceSubject, pl.j, p.fence.leader, p.fence.term, body),
				jetstream.WithExpectStream(p.cfg.EventsStream), jetstream.WithExpectLastSequencePerSubject(pl.last.Sequence))
			if err != nil {
				return fmt.Errorf("storing the fence markers again: %w", err)
			}
			futures[i] = f
		}
		wait := time.NewTimer(p.cfg.Timeout)
		defer wait.Stop()
		for i, f := range futures {
			select {
			case ack := <-f.Ok():
				p.fence.set(piles[i].j, ack.Sequence)
				p.foreignWrite(p.fence.subjects[piles[i].j], piles[i].last)
			case err := <-f.Err():
				if !wrongLastSequence(err) {
					return fmt.Errorf("storing the fence marker on %s again: %w", p.fence.subjects[piles[i].j], err)
				}
				return nil // written to again meanwhile: the next sweep looks again
			case <-wait.C:
				return fmt.Errorf("storing the fence markers again: %w", context.DeadlineExceeded)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	p.fence.known = max(p.fence.known, newest.Sequence)
	p.fence.again = left
	return nil
}

// sweepRestart records P.leader.restart's directive as taken over messages other clients wrote after it,
// which the rollup removes; on condition that the last of them is still the subject's last message, and
// that this leader still holds the lease (read after it). A directive there is then no longer pending: a
// leader takes it when its term begins, before it publishes, and an operator's new one is stored only
// after the lease was seized from this leader (the condition then fails). again is true when the subject
// was written to meanwhile, for the next sweep to look at.
func (p *Publisher) sweepRestart(ctx context.Context) (again bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	subject := restartSubject(p.cfg.FenceSubject)
	m, err := p.fence.stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return false, fmt.Errorf("reading the last message on %s: %w", subject, err)
	}
	if m.Header.Get(HeaderRestart) != "" {
		return false, nil // the last is a directive or its record: what piled up before it is gone
	}
	held, err := p.cfg.Confirm(ctx)
	if err != nil || !held {
		return false, err
	}
	rec := &nats.Msg{Subject: subject, Header: rollup(nats.Header{HeaderRestart: {restartTaken}})}
	ack, err := p.js.PublishMsg(ctx, rec, jetstream.WithExpectStream(p.cfg.EventsStream),
		jetstream.WithExpectLastSequencePerSubject(m.Sequence))
	switch {
	case err == nil:
		p.foreignWrite(subject, m)
		p.fence.known = max(p.fence.known, ack.Sequence)
		return false, nil
	case wrongLastSequence(err):
		return true, nil // written to again: the next sweep looks again
	}
	return false, fmt.Errorf("recording %s over another client's messages: %w", subject, err)
}

// fenceIndex returns j for the fence subject base.<j>.
func fenceIndex(base, subject string) (int, bool) {
	rest, ok := strings.CutPrefix(subject, base+".")
	if !ok {
		return 0, false
	}
	j, err := strconv.Atoi(rest)
	if err != nil || j < 0 || j >= FenceWidth || strconv.Itoa(j) != rest {
		return 0, false
	}
	return j, true
}

// reclaimAttempts bounds the reads and writes of one reclaimSubject: writes coming faster than a round
// trip end the term (the next one stores a full set of markers).
const reclaimAttempts = 3

// foreignWrite counts another client's write found on a fence subject and logs it, at most once a minute,
// with the number held back since the last line.
func (p *Publisher) foreignWrite(subject string, m *jetstream.RawStreamMsg) {
	p.cfg.Observer.ForeignFenceWrite()
	if ok, held := p.fence.log.Allow("fence"); ok {
		p.log.Warn(foreignFenceLog, "fence_subject", subject, "seq", m.Sequence, "bytes", len(m.Data),
			"not_logged_since", held)
	}
}

// foreignFenceLog is the log line of a write another client made on a fence subject.
const foreignFenceLog = "a fence subject held a message no bridge wrote (another client in the bridge's NATS account published to it, or JetStream stored its acknowledgement of a client's publish there); claimed again"

// errFenced logs the fencing and returns ErrFenced with the refusal.
func (p *Publisher) errFenced(e *pending) error {
	subject, seq := p.fence.check(e.seq)
	p.log.Warn("events refused by the fence: another bridge leads now; stopping", "fence_subject", subject,
		"fence_seq", seq, "event_id", e.id, "err", e.err)
	return fmt.Errorf("%w: %w", ErrFenced, e.err)
}
