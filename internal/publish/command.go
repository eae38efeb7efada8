package publish

// The operator's commands on the event path (`bridge cursor show`, `bridge cursor restart`), on a NATS
// connection the caller made.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/lease"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// Cursor is where the event path stands, as `bridge cursor show` prints it: the point the next leader
// resumes the upstream stream after, and the lease's holder.
type Cursor struct {
	Stream string `json:"stream"`
	// ResumeAfter is the id the next connection sends as Last-Event-ID; "" means the upstream's beginning.
	// A pending restart directive (`bridge cursor restart`) is taken into account. It may lag LastEvent by
	// up to a publish window: the events stored after it are recognised when the upstream replays them.
	ResumeAfter string `json:"resume_after"`
	// LastEvent is the id of the newest event in the stream (Tracking-Event-Id); "" when none.
	LastEvent string `json:"last_event"`
	// Holder is the lease's holder; nil while nobody leads.
	Holder *lease.Holder `json:"holder"`
}

// ShowCursor reads the resume cursor from the events stream's tail, as a new leader would with a publish
// window of window, and the lease's holder. It changes nothing.
func ShowCursor(ctx context.Context, nc *nats.Conn, streams layout.Streams, window int) (Cursor, error) {
	c := Cursor{Stream: streams.Events()}
	js, err := jetstream.New(nc)
	if err != nil {
		return c, err
	}
	p, err := New(nc, Config{Prefix: streams.Prefix, EventsStream: streams.Events(),
		DLQStream: streams.DLQ(), FenceSubject: streams.FenceSubject(), Window: window,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return c, err
	}
	defer p.Close()
	if c.ResumeAfter, err = p.Resume(ctx); err != nil {
		return c, err
	}
	s, err := js.Stream(ctx, streams.Events())
	if err != nil {
		return c, err
	}
	switch m, err := s.GetLastMsgForSubject(ctx, streams.EventsSubject()); {
	case err == nil:
		c.LastEvent = m.Header.Get(HeaderEventID)
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return c, err
	}
	h, ok, err := lease.Read(ctx, js, streams.Leases(), "")
	if err != nil {
		return c, err
	}
	if ok {
		c.Holder = &h
	}
	return c, nil
}

// RestartCursor makes the next leader resume the upstream stream after the event id after, or from the
// beginning. It goes through the lease: it seizes the lease (the leader in office stops leading), stores a
// full set of fence markers (which fence out anything the former leader still has in flight) and then the
// directive, confirms that no bridge can have read its cursor before the directive, and releases the
// lease; whichever bridge leads next reads the directive as its cursor, so no event is stored after the
// directive before a leader has taken it. The confirmation: the hold never lapsed (lease.Confirm), so no
// bridge began leading since the seizure; and no leader's marker came after the operator's
// (leaderCrossed), which the leader that stepped down leaves when it was claiming the fence just then.
// Otherwise such a bridge might never take the directive, and a later leader would find it older than
// the events and ignore it: the directive is withdrawn, unless a leader took it already, and the restart
// fails with ErrRestartWithdrawn. It returns what happened, for the operator.
// The arguments are checked (CheckRestart) before anything changes; the caller may check them before
// connecting.
func RestartCursor(ctx context.Context, nc *nats.Conn, streams layout.Streams, leaseTTL time.Duration, after string,
	beginning bool) (string, error) {
	if err := CheckRestart(after, beginning); err != nil { // before the leader steps down
		return "", err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	host, _ := os.Hostname()
	prev, held, rev, err := lease.Seize(ctx, js, streams.Leases(), "operator@"+host, leaseTTL)
	if err != nil {
		return "", err
	}
	msg := "no bridge was leading"
	if held {
		msg = fmt.Sprintf("the leader %s (pid %d, epoch %d) stepped down", logging.Value(prev.Name, 64), prev.PID, prev.Epoch)
	}
	first, seq, rerr := storeRestart(ctx, js, streams.Events(), streams.FenceSubject(), after, beginning)
	note := ""
	if rerr == nil {
		// Whether a bridge may have read its cursor before the directive: a new leader after the hold
		// ran out, or the one that stepped down, caught claiming the fence.
		next, cerr := lease.Confirm(ctx, js, streams.Leases(), rev, leaseTTL)
		if cerr == nil {
			rev = next
			cerr = leaderCrossed(ctx, js, streams.Events(), streams.FenceSubject(), first, seq)
		}
		if cerr != nil {
			note, rerr = settleUnconfirmed(ctx, js, streams, seq, cerr)
		}
	}
	// Released in any case: a failed restart must not keep the bridges from leading until the TTL.
	switch err := lease.Release(context.WithoutCancel(ctx), js, streams.Leases(), rev); {
	case errors.Is(err, lease.ErrNotHeld):
		// The hold ran out before the release: after a confirmed restart, which stands, or after
		// settleUnconfirmed said what became of the directive. Nothing to undo either way.
	case err != nil && rerr == nil:
		rerr = fmt.Errorf("%w (the restart directive is stored; the bridges lead again after BRIDGE_LEASE_TTL)", err)
	}
	if rerr != nil {
		return msg, rerr
	}
	return fmt.Sprintf("%s; restart directive stored on %s at sequence %d; the next leader resumes there%s",
		msg, streams.FenceSubject()+".restart", seq, note), nil
}

// settleUnconfirmed decides what became of the directive at seq when the restart could not be confirmed
// (cerr, whatever it is: a bridge may have read its cursor before the directive, or it is not known). It
// withdraws the directive, which is always safe: one a leader took already stands, and the restart with
// it, said in the note. Withdrawn, the restart fails (ErrRestartWithdrawn); if even that fails, the
// error says what is known.
func settleUnconfirmed(ctx context.Context, js jetstream.JetStream, streams layout.Streams, seq uint64, cerr error) (note string, err error) {
	taken, err := withdrawRestart(context.WithoutCancel(ctx), js, streams.Events(), streams.FenceSubject(), seq)
	switch {
	case errors.Is(err, ErrRestartSuperseded):
		return "", fmt.Errorf("the restart could not be confirmed (%w): %w", cerr, err)
	case err != nil:
		return "", fmt.Errorf("the restart could not be confirmed (%w), and withdrawing its directive at sequence %d "+
			"failed: %w; see `bridge cursor show`", cerr, seq, err)
	case taken:
		return fmt.Sprintf(" (it could not be confirmed, %v, but a leader has taken the directive)", cerr), nil
	}
	return "", fmt.Errorf("%w (%w)", ErrRestartWithdrawn, cerr)
}

// ErrRestartWithdrawn is RestartCursor's failure when the restart could not be confirmed: a bridge may
// have read its cursor before the directive was stored (the hold on the lease ran out, or the leader that
// stepped down was claiming the fence), or the confirmation failed. The directive is withdrawn, and
// nothing restarts.
var ErrRestartWithdrawn = errors.New("the restart could not be confirmed, so a bridge may have read its cursor " +
	"before the restart directive was stored: the directive was withdrawn and nothing will restart; run the command again")
