package units

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
)

// event is one event taken from the stream, with what the view orders it by.
type event struct {
	msg    jetstream.Msg
	unit   string
	stamp  stamp
	stored time.Time // when the stream stored it
}

// MaxAhead is how far an event's timestamp may lie after the time the events stream stored it (clocks
// that disagree) and the event still be kept. A report producer may date an event in the year 9999; kept,
// it would stay its unit's latest for good, every real event after it hidden, and come back with every
// rebuild.
const MaxAhead = time.Hour

// parse reads the event's unit, id and timestamp. An event the view does not keep (no unit, no RFC 3339
// timestamp, a timestamp more than MaxAhead after its storage) is acknowledged and counted here, and ok
// is false.
func (v *View) parse(msg jetstream.Msg) (ev event, ok bool) {
	ev = event{msg: msg, unit: unitOf(v.base, msg.Subject(), msg.Data())}
	if md, err := msg.Metadata(); err == nil {
		ev.stored = md.Timestamp
	}
	if ev.unit == layout.NoUnit {
		v.done(ev, OutcomeNoUnit)
		return ev, false
	}
	at, ok := timestampOf(msg.Data())
	if !ok {
		v.done(ev, OutcomeBadTimestamp)
		return ev, false
	}
	if !ev.stored.IsZero() && at.After(ev.stored.Add(MaxAhead)) {
		v.done(ev, OutcomeFuture)
		return ev, false
	}
	ev.stamp = stamp{at: at, id: msg.Headers().Get(jetstream.MsgIDHeader)}
	if ev.stamp.id == "" {
		ev.stamp.id = msg.Headers().Get(layout.HeaderEventID)
	}
	return ev, true
}

// done acknowledges the event with its outcome. A lost acknowledgement only means the event comes again,
// which changes nothing.
func (v *View) done(ev event, outcome string) {
	_ = ev.msg.Ack()
	v.count(outcome)
}

func (v *View) count(outcome string) {
	for i, o := range outcomes {
		if o == outcome {
			v.counts[i].Add(1)
		}
	}
	v.m.outcome(outcome)
}

// maxConflicts is how often one event is decided again after a conflict before it is handed back.
const maxConflicts = 8

// handleQueued handles ev with the events already waiting behind it in its worker's queue q (at most
// queueLen): of the events of one unit only the latest is written, and the others settle with it. So
// when events come faster than the view writes (a flood, a replay), a unit costs one write per batch
// instead of one per event, and the view spends its time where the event path does not need it.
func (v *View) handleQueued(ctx context.Context, kv jetstream.Stream, ev event, q <-chan event) {
	batch := []event{ev}
more:
	for len(batch) < queueLen {
		select {
		case e, ok := <-q:
			if !ok {
				break more
			}
			batch = append(batch, e)
		default:
			break more
		}
	}
	for len(batch) > 0 {
		unit := batch[0].unit
		var same []event
		rest := batch[:0]
		latest := 0
		for _, e := range batch {
			if e.unit != unit {
				rest = append(rest, e)
				continue
			}
			if len(same) > 0 && e.stamp.after(same[latest].stamp) {
				latest = len(same)
			}
			same = append(same, e)
		}
		batch = rest
		same[0], same[latest] = same[latest], same[0]
		v.handle(ctx, kv, same[0], same[1:])
	}
}

// handle applies one event and settles it with the older events of its unit: acknowledged once its
// unit's value is it or a later event, handed back (Nak with a delay) when the bucket cannot be written.
func (v *View) handle(ctx context.Context, kv jetstream.Stream, ev event, older []event) {
	for attempt := 0; ; attempt++ {
		outcome, err := v.apply(ctx, kv, ev)
		if err == nil {
			v.setProblem(&v.writeErr, "")
			if outcome == OutcomeApplied {
				v.lastWrite.Store(time.Now().UnixNano())
			}
			v.done(ev, outcome)
			for _, e := range older {
				v.done(e, OutcomeOlder)
			}
			return
		}
		if errors.Is(err, errConflict) && attempt < maxConflicts {
			v.conflicts.Add(1)
			v.m.conflict()
			continue
		}
		msg := fmt.Sprintf("writing unit %s of event %s: %v", ev.unit, logging.Value(ev.stamp.id, 128), err)
		v.mu.Lock()
		first := v.writeErr == ""
		v.writeErr = msg
		v.mu.Unlock()
		if first {
			v.log.Warn("units view: a write failed; the event comes again", "err", msg)
		}
		md, _ := ev.msg.Metadata()
		delivered := 1
		if md != nil {
			delivered = int(min(md.NumDelivered, 30))
		}
		delay := retry.Backoff(v.cfg.BackoffMin, v.cfg.BackoffMax, delivered-1)
		for _, e := range append(older, ev) {
			_ = e.msg.NakWithDelay(delay)
			v.count(OutcomeRetry)
		}
		return
	}
}

// errConflict is apply's error when the unit's value changed between its read and the write.
var errConflict = errors.New("the unit's value changed meanwhile")

// apply makes ev its unit's value if it is later than the value there: it reads the value (or takes it
// from the cache), and writes ev with a compare-and-set on the revision it read.
func (v *View) apply(ctx context.Context, kv jetstream.Stream, ev event) (string, error) {
	gen := v.cache.generation()
	cur, cached := v.cache.get(ev.unit)
	for {
		if !cached {
			var err error
			if cur, err = v.read(ctx, kv, ev.unit); err != nil {
				return "", err
			}
			v.cache.put(gen, ev.unit, cur)
		}
		if !cur.present || ev.stamp.after(cur.stamp) {
			break
		}
		if !cached {
			return OutcomeOlder, nil
		}
		// Only the bucket decides that an event is not kept: the cache may be behind a purge (a rebuild).
		cached = false
	}
	m := nats.NewMsg(v.cfg.Streams.UnitSubject(ev.unit))
	m.Data = ev.msg.Data()
	m.Header.Set(layout.HeaderEventID, ev.stamp.id)
	m.Header.Set(layout.HeaderUnit, ev.unit)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(cur.rev, 10))
	wctx, cancel := context.WithTimeout(ctx, opTimeout)
	ack, err := v.js.PublishMsg(wctx, m)
	cancel()
	if err != nil {
		v.cache.drop(ev.unit)
		var api *jetstream.APIError
		if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return "", errConflict
		}
		return "", err
	}
	v.cache.put(gen, ev.unit, value{present: true, rev: ack.Sequence, stamp: ev.stamp})
	return OutcomeApplied, nil
}

// value is what the view knows of a unit's value: its revision (0: none was ever written) and the order
// of the event it holds.
type value struct {
	present bool
	rev     uint64
	stamp   stamp
}

// read reads the unit's value from the bucket. A value whose timestamp cannot be read (a foreign write)
// is older than any event.
func (v *View) read(ctx context.Context, kv jetstream.Stream, unit string) (value, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	msg, err := kv.GetLastMsgForSubject(ctx, v.cfg.Streams.UnitSubject(unit))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return value{}, nil
	}
	if err != nil {
		return value{}, fmt.Errorf("reading the unit's value: %w", err)
	}
	cur := value{rev: msg.Sequence}
	if op := msg.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return cur, nil
	}
	cur.present = true
	cur.stamp.id = msg.Header.Get(layout.HeaderEventID)
	cur.stamp.at, _ = timestampOf(msg.Data) // zero, the oldest, when unreadable
	return cur, nil
}

// cache remembers what the view last read or wrote of each unit, so that a later event usually costs one
// write and no read. It may be behind the bucket (another bridge wrote since, a rebuild purged it): the
// compare-and-set of a write then fails and the unit is read again, and an event the cache finds older
// is read again before it is dropped. It is emptied when the consumer is taken again, and a read begun
// before that is not remembered (generation). It holds at most cacheMax units; beyond, some are forgotten.
type cache struct {
	mu    sync.Mutex
	gen   uint64
	units map[string]value
}

// cacheMax bounds the cache: an entry is a unit token, a revision, an instant and the event's id, 300 to
// 400 bytes with the map's own share for ids of 26 bytes (15 to 19 MB at the bound in heap profiles of a
// bridge that applied 120,000 units; the ids are the events' own, so longer ones cost more). A unit it
// forgot costs one direct get of its value.
const cacheMax = 50_000

func (c *cache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

func (c *cache) get(unit string) (value, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	val, ok := c.units[unit]
	return val, ok
}

// put remembers val for unit. It keeps copies of the unit and of the id: nats.go decodes a message's
// headers into one string and hands out parts of it, and the unit is cut from the subject, so the strings
// given would keep the whole header block (about 500 bytes for an event, up to 64 KiB) alive as long as
// the entry.
func (c *cache) put(gen uint64, unit string, val value) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	unit, val.stamp.id = strings.Clone(unit), strings.Clone(val.stamp.id)
	if c.units == nil {
		c.units = map[string]value{}
	}
	if _, ok := c.units[unit]; !ok && len(c.units) >= cacheMax {
		n := 0
		for k := range c.units { // map order: a cheap random sample
			delete(c.units, k)
			if n++; n == cacheMax/16 {
				break
			}
		}
	}
	c.units[unit] = val
}

func (c *cache) drop(unit string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.units, unit)
}

func (c *cache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.units = nil
}
