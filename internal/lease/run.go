package lease

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// releaseTimeout bounds the deletion of the key on a clean stop: a standby takes over at the TTL anyway.
const releaseTimeout = 2 * time.Second

// runner is the state of one Run, owned by its goroutine.
type runner struct {
	*Lease
	kv  jetstream.KeyValue
	rev uint64 // the key's revision this process wrote last; 0 when the key is known not to be its own

	renew *time.Timer // the next renewal, while leading
	// sitOutUntil: after a resignation, acquire nothing before then.
	sitOutUntil time.Time
	expire      *time.Timer // the end of leadership unless a renewal succeeds first, while leading

	// seen is when this process last saw the key hold a bridge's lease, or free: a foreign value that
	// replaced it counts as that lease never renewed from then on (see foreignValue).
	seen time.Time
	// A foreign value in the key (see foreignValue): its revision, when the lease it replaced was last
	// seen (or, when none was, when this process first saw the foreign value), and the time to take the
	// key over.
	foreignRev   uint64
	foreignSince time.Time
	takeover     *time.Timer
}

func (r *runner) run(ctx context.Context) error {
	r.renew = time.NewTimer(time.Hour)
	r.renew.Stop()
	r.expire = time.NewTimer(time.Hour)
	r.expire.Stop()
	r.takeover = time.NewTimer(time.Hour)
	r.takeover.Stop()
	defer r.renew.Stop()
	defer r.expire.Stop()
	defer r.takeover.Stop()
	retry := time.NewTicker(r.cfg.RetryInterval)
	defer retry.Stop()

	updates := r.watch(ctx)
	r.acquire(ctx)
	for {
		select {
		case <-ctx.Done():
			r.stop(ctx)
			return nil
		case e, ok := <-updates:
			if !ok {
				updates = nil // watch again at the next retry
				continue
			}
			r.observe(ctx, e)
		case <-retry.C:
			if updates == nil {
				updates = r.watch(ctx)
			}
			if !r.isLeading() {
				r.acquire(ctx)
			}
		case <-r.renew.C:
			r.renewal(ctx)
		case <-r.expire.C:
			r.demote("could not renew in time")
		case <-r.takeover.C:
			if !r.isLeading() {
				r.acquire(ctx) // finds the foreign value due, and takes the key over
			}
		case rq := <-r.resign:
			if r.isLeading() && r.currentEpoch() == rq.epoch {
				r.sitOutUntil = time.Now().Add(rq.sitOut)
				r.demote("resigned: " + rq.reason)
				r.release(ctx)
			}
		}
	}
}

// watch starts watching the key; nil when it could not (the retry tick tries again).
func (r *runner) watch(ctx context.Context) <-chan jetstream.KeyValueEntry {
	w, err := r.kv.Watch(ctx, r.cfg.Key)
	if err != nil {
		r.log.Warn("cannot watch the lease", "err", err)
		return nil
	}
	return w.Updates()
}

func (r *runner) isLeading() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leading
}

// acquire tries to create the key: it succeeds only when the key is absent, deleted or expired.
func (r *runner) acquire(ctx context.Context) {
	if time.Now().Before(r.sitOutUntil) {
		return // the retry tick tries again
	}
	sent := time.Now()
	actx, cancel := context.WithTimeout(ctx, r.cfg.TTL-r.cfg.Margin)
	defer cancel()
	rev, err := r.kv.Create(actx, r.cfg.Key, valueFor(r.self), jetstream.KeyTTL(r.cfg.TTL))
	switch {
	case err == nil:
		r.rev = rev
		if time.Since(sent) >= r.cfg.TTL-r.cfg.Margin {
			r.log.Warn("lease acquired too late to lead; releasing it", "revision", rev)
			r.release(ctx)
			return
		}
		r.lead(rev, sent)
	case errors.Is(err, jetstream.ErrKeyExists):
		e, gerr := r.kv.Get(actx, r.cfg.Key)
		if gerr == nil {
			r.observe(ctx, e)
		}
	case ctx.Err() == nil:
		r.log.Debug("cannot acquire the lease", "err", err)
	}
}

// foreignValue takes in, on a standby, a value in the key that is not a bridge's lease: written by another
// client (a JetStream acknowledgement a publisher aimed at the key, say), with no TTL, so it would never
// expire and no bridge could lead again. It replaced the lease last seen in the key, which counts as never
// renewed from then on: one TTL after this process last saw a bridge's lease there (or first saw the
// foreign value, when it never saw one), by its own clock, the key is free to take over. A leader that is
// alive writes its lease back within a round trip (reclaim), which ends the count; further foreign writes
// do not restart it, so no stream of them delays a takeover.
func (r *runner) foreignValue(ctx context.Context, e jetstream.KeyValueEntry) {
	if e.Revision() != r.foreignRev {
		if r.foreignRev == 0 {
			r.foreignSince = r.seen
			if r.foreignSince.IsZero() {
				r.foreignSince = time.Now()
			}
		}
		r.foreignRev = e.Revision()
		r.foreignWrite(e, "the lease it replaced counts as expired one TTL after it was last seen")
	}
	if left := r.cfg.TTL - time.Since(r.foreignSince); left > 0 {
		r.takeover.Reset(left)
		return
	}
	r.takeOver(ctx, e.Revision())
}

// foreignWriteLog is the log line of a foreign write: it names what follows, the value cut short, and the
// number of foreign writes not logged since the last line.
const foreignWriteLog = "the lease key holds a value no bridge wrote: another client in the bridge's NATS account published to it"

// foreignWrite counts a foreign value written into the key and logs it, at most once a minute, with the
// number held back since the last line and the value cut short.
func (r *runner) foreignWrite(e jetstream.KeyValueEntry, what string) {
	if r.cfg.OnForeignWrite != nil {
		r.cfg.OnForeignWrite()
	}
	if ok, held := r.foreignLog.Allow("lease"); ok {
		r.log.Warn(foreignWriteLog, "then", what, "revision", e.Revision(), "value", quoteValue(e.Value()), "bytes", len(e.Value()),
			"created", e.Created().UTC().Format(time.RFC3339Nano), "ttl", r.cfg.TTL.String(), "not_logged_since", held)
	}
}

// takeOver writes this process's lease over the foreign value at revision rev, on condition that the key
// is still at it, with the lease's TTL (not kv.Update, which would drop it: nats.go #1994). Another
// bridge that got there first makes it fail; the key is then read again.
func (r *runner) takeOver(ctx context.Context, rev uint64) {
	if time.Now().Before(r.sitOutUntil) {
		return // a replica that resigned sits out here too; the retry tick tries again
	}
	sent := time.Now()
	actx, cancel := context.WithTimeout(ctx, r.cfg.TTL-r.cfg.Margin)
	defer cancel()
	ack, err := r.js.PublishMsg(actx, r.natsMsg(valueFor(r.self)),
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(r.cfg.TTL))
	switch {
	case err == nil:
		r.rev = ack.Sequence
		r.log.Info("took the lease over from a foreign value", "foreign_revision", rev, "revision", ack.Sequence)
		if time.Since(sent) >= r.cfg.TTL-r.cfg.Margin {
			r.log.Warn("lease acquired too late to lead; releasing it", "revision", ack.Sequence)
			r.release(ctx)
			return
		}
		r.lead(ack.Sequence, sent)
	case isWrongRevision(err):
		if e, gerr := r.kv.Get(actx, r.cfg.Key); gerr == nil && e.Revision() != rev {
			r.observe(ctx, e)
		}
	case ctx.Err() == nil:
		r.log.Debug("cannot take the lease over from a foreign value", "err", err)
	}
}

// maxQuotedValue bounds how much of a foreign value the log shows.
const maxQuotedValue = 128

// quoteValue renders a foreign value for the log: at most maxQuotedValue bytes of valid UTF-8, control
// characters removed, "…" where it was cut. Only its first 4*maxQuotedValue bytes are read.
func quoteValue(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(string(b[:min(len(b), 4*maxQuotedValue)]), "\uFFFD"))
	if len(b) > 4*maxQuotedValue && len(s) <= maxQuotedValue {
		return s + "…" // the bytes not read were cut
	}
	return logging.Cut(s, maxQuotedValue)
}

// lead makes this process the leader of epoch rev, acquired by a request sent at sent.
func (r *runner) lead(rev uint64, sent time.Time) {
	h := r.self
	h.Epoch = rev
	r.value = valueFor(h)
	h.Revision = rev
	r.mu.Lock()
	r.leading = true
	r.holder = h
	r.sawHolder = r.sawHolder || h.Instance != ""
	r.mu.Unlock()
	r.renewed(rev, sent)
	r.log.Info("leading", "holder", h.Name, "pid", h.PID, "instance", h.Instance, "epoch", rev)
	if r.cfg.OnChange != nil {
		r.cfg.OnChange(true)
	}
}

// renewed records a successful write of revision rev sent at sent, and schedules the next renewal and the
// end of leadership from the time it was sent: the server starts the key's TTL only after it receives it.
func (r *runner) renewed(rev uint64, sent time.Time) {
	r.rev = rev
	until := sent.Add(r.cfg.TTL - r.cfg.Margin)
	r.mu.Lock()
	r.validUntil = until
	r.renewedAt = sent
	r.holder.Revision = rev
	r.mu.Unlock()
	r.renew.Reset(time.Until(sent.Add(r.cfg.RenewInterval)))
	r.expire.Reset(time.Until(until))
}

// renewal writes the key again with the same value and a fresh TTL, on condition that its last revision is
// still this process's. It does not use kv.Update, which would drop the key's TTL (nats.go #1994).
func (r *runner) renewal(ctx context.Context) {
	r.mu.Lock()
	until := r.validUntil
	r.mu.Unlock()
	rctx, cancel := context.WithDeadline(ctx, until) // never wait past the end of leadership
	defer cancel()
	sent := time.Now()
	ack, err := r.js.PublishMsg(rctx, r.natsMsg(r.value),
		jetstream.WithExpectLastSequencePerSubject(r.rev), jetstream.WithMsgTTL(r.cfg.TTL))
	switch {
	case err == nil:
		r.renewed(ack.Sequence, sent)
	case ctx.Err() != nil:
		// Run is stopping; stop releases the key.
	case isWrongRevision(err):
		r.recheck(rctx, err)
	case !time.Now().Before(until):
		r.demote("could not renew in time")
	default:
		r.log.Debug("lease renewal failed; retrying", "err", err)
		r.renew.Reset(min(r.cfg.RenewInterval/4, time.Until(until)))
	}
}

// recheck reads the key after a renewal was refused for its revision: a renewal whose answer was lost may
// have moved it on with this process's own value, which it adopts; anything else means the lease is lost.
// A foreign value that got in before the renewal is written over at once (reclaim).
func (r *runner) recheck(ctx context.Context, cause error) {
	e, err := r.kv.Get(ctx, r.cfg.Key)
	if err == nil {
		if h, ok := holderOf(e); ok && h.Instance == r.self.Instance {
			r.rev = e.Revision()
			r.renew.Reset(r.cfg.RenewInterval / 4)
			return
		}
		if isForeign(e) && e.Revision() > r.rev {
			r.foreignWrite(e, "the leader writes its lease back over it")
			r.rev = e.Revision()
			r.renew.Reset(0) // from Run's loop, not from here: foreign writes may keep coming
			return
		}
	}
	r.rev = 0
	r.demote("lease lost: " + cause.Error())
}

// reclaim writes the leader's lease back over a foreign value at once: a renewal on condition that the key
// is still at the foreign revision. The foreign write is no other bridge's (their values say who wrote
// them) and took nothing over, so the term goes on; a bridge that took the key meanwhile makes the write
// fail, and the key is read again (recheck). It runs at most once per foreign revision.
func (r *runner) reclaim(ctx context.Context, e jetstream.KeyValueEntry) {
	if e.Revision() <= r.rev {
		return // already written over (or this process's own write came after it)
	}
	r.foreignWrite(e, "the leader writes its lease back over it")
	r.rev = e.Revision()
	r.renewal(ctx)
}

// ownRevision reads the key: its revision, when it holds this process's own value (a renewal whose answer
// was lost moved it on).
func (r *runner) ownRevision(ctx context.Context) (uint64, bool) {
	e, err := r.kv.Get(ctx, r.cfg.Key)
	if err != nil {
		return 0, false
	}
	h, ok := holderOf(e)
	return e.Revision(), ok && h.Instance == r.self.Instance
}

// observe takes in an entry of the key, from the watch or a read.
func (r *runner) observe(ctx context.Context, e jetstream.KeyValueEntry) {
	if e == nil { // the end of the watch's initial values
		return
	}
	h, put := holderOf(e)
	foreign := isForeign(e)
	if !foreign {
		r.seen, r.foreignRev = time.Now(), 0
	}
	if r.isLeading() {
		switch {
		case e.Revision() <= r.rev:
			// an older entry than this process's last write
		case put && h.Instance == r.self.Instance:
			r.rev = e.Revision() // a renewal whose answer has not arrived (yet)
		case put:
			r.rev = 0
			r.demote("lease taken by " + h.Name)
		case foreign:
			r.reclaim(ctx, e)
		default:
			r.rev = 0
			r.demote("lease deleted or expired")
			r.acquire(ctx) // compete at once, as the standbys do
		}
		return
	}
	r.mu.Lock()
	prev := r.holder
	r.holder = h
	r.sawHolder = r.sawHolder || h.Instance != ""
	r.mu.Unlock()
	if (h.Instance != prev.Instance || h.Epoch != prev.Epoch) && !foreign {
		if put {
			r.log.Info("standing by", "holder", h.Name, "pid", h.PID, "instance", h.Instance, "epoch", h.Epoch)
		} else {
			r.log.Info("lease free")
		}
	}
	if e.Revision() > r.rev && h.Instance != r.self.Instance {
		r.rev = 0 // the key moved on without this process: nothing of its own left to release
	}
	switch {
	case foreign:
		r.foreignValue(ctx, e)
	case !put:
		r.acquire(ctx)
	case h.Instance == r.self.Instance:
		// Still this process's key after it stopped leading (a renewal that was stored but not answered):
		// deleting it lets every replica compete at once instead of after the TTL.
		r.rev = e.Revision()
		r.release(ctx)
	}
}

// currentEpoch is the epoch this process leads, or last knew of.
func (r *runner) currentEpoch() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holder.Epoch
}

// demote ends this process's leadership and tells the daemon.
func (r *runner) demote(reason string) {
	r.mu.Lock()
	was := r.leading
	epoch := r.holder.Epoch
	r.leading = false
	r.validUntil = time.Time{}
	if r.rev == 0 {
		r.holder = Holder{}
	}
	r.mu.Unlock()
	r.renew.Stop()
	r.expire.Stop()
	if !was {
		return
	}
	r.log.Info("stopped leading", "reason", reason, "epoch", epoch)
	if r.cfg.OnChange != nil {
		r.cfg.OnChange(false)
	}
}

// release deletes the key on condition that it is still at this process's last revision.
func (r *runner) release(ctx context.Context) {
	if r.rev == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	err := r.kv.Delete(rctx, r.cfg.Key, jetstream.LastRevision(r.rev))
	if isWrongRevision(err) {
		// A renewal stored but not answered (Run stopped while it was in flight) moved the key on with
		// this process's own value: release that revision, or the next leader waits out the TTL.
		if rev, ok := r.ownRevision(rctx); ok {
			r.rev = rev
			err = r.kv.Delete(rctx, r.cfg.Key, jetstream.LastRevision(r.rev))
		}
	}
	if err != nil {
		r.log.Warn("cannot release the lease; it expires after its TTL", "err", err, "revision", r.rev)
	} else {
		r.log.Info("released the lease", "revision", r.rev)
	}
	r.rev = 0
	r.mu.Lock()
	r.holder = Holder{}
	r.mu.Unlock()
}

// stop ends a Run: the daemon stops leading first, then the key is released.
func (r *runner) stop(ctx context.Context) {
	r.demote("stopping")
	r.release(ctx)
}
