package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
)

// The units endpoints are answered from NATS, never from the upstream: units.get reads the latest event
// of a loading unit from the units bucket PFX_UNITS (which the bridges build from the events stream), and
// units.events reads a unit's most recent events from PFX_EVENTS through the subject filter
// P.events.*.<UNIT>. They go through the same reply check, endpoint list, body bound, metrics and
// discovery as the upstream's operations, with slots of their own (Config.Concurrency reads of each
// endpoint in flight besides as many upstream calls), so a slow upstream never makes them busy and
// units.events never makes units.get busy. They change nothing, so they are never audited.

// UnitHeader is on the reply to units.get: the unit token of the number asked for, the bucket's key.
const UnitHeader = "Tracking-Unit"

// Bounds of units.events (docs/api.md#the-units-endpoints): the events a reply holds when the request
// names no limit, and the most it may name. A reply holds fewer when the events would not fit in the
// NATS server's max_payload: the oldest are left out.
const (
	DefaultUnitEvents = 20
	MaxUnitEvents     = 200
)

// unitQuery is a checked request of a units endpoint.
type unitQuery struct {
	number string // the unit's number as the caller wrote it
	token  string // its unit token, the bucket's key and the last token of its events' subjects
	limit  int    // units.events: at most this many events
}

// buildUnit checks the body of units.get ({"unit"}) or, with events, of units.events
// ({"unit", "limit"}).
func buildUnit(events bool) func(c *checker, body []byte) (unitQuery, []string) {
	return func(c *checker, body []byte) (unitQuery, []string) {
		env, ok := c.envelope(body, false)
		if !ok {
			return unitQuery{}, c.list()
		}
		q := unitQuery{limit: DefaultUnitEvents}
		if events {
			c.unknown(env, "unit", "limit")
			if n, ok := c.integer(env, "limit", 1); ok {
				if n > MaxUnitEvents {
					c.addf("limit must be at most %d, not %d", MaxUnitEvents, n)
				}
				q.limit = int(min(n, MaxUnitEvents))
			}
		} else {
			c.unknown(env, "unit")
		}
		if number, ok := c.str(env, "unit", true); ok {
			q.number, q.token = number, layout.UnitToken(number)
			if q.token == layout.NoUnit {
				c.addf("unit %s names no loading unit: its letters and digits, upper-cased, must be 1 to %d "+
					"characters (e.g. \"MSKU 123456-7\" is unit MSKU1234567)", strQuote(number), layout.MaxUnitToken)
			}
		}
		return q, c.list()
	}
}

// units reads the units bucket and the events stream for the units endpoints, through the service's
// own NATS connection.
type units struct {
	js     jetstream.JetStream
	prefix string
	bucket string // PFX_UNITS
	stream string // PFX_EVENTS

	mu sync.Mutex
	kv jetstream.KeyValue // the bucket, once looked up; dropped when a read fails otherwise than not found
}

func newUnits(js jetstream.JetStream, prefix string) *units {
	return &units{js: js, prefix: prefix, bucket: layout.UnitsBucket(prefix), stream: layout.EventsStream(prefix)}
}

// errNoView: the units bucket does not exist (BRIDGE_UNITS_VIEW=false on every bridge, or not created yet).
var errNoView = errors.New("no units bucket")

// errNoEvents: the events stream does not exist.
var errNoEvents = errors.New("no events stream")

// handle returns the bucket, looking it up the first time and after a failed read.
func (u *units) handle(ctx context.Context) (jetstream.KeyValue, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.kv != nil {
		return u.kv, nil
	}
	kv, err := u.js.KeyValue(ctx, u.bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, errNoView
	}
	if err != nil {
		return nil, err
	}
	u.kv = kv
	return kv, nil
}

func (u *units) forget(kv jetstream.KeyValue) {
	u.mu.Lock()
	if u.kv == kv {
		u.kv = nil
	}
	u.mu.Unlock()
}

// latest returns the value of the unit's key: its latest event's data. A key that was deleted or purged
// is not found.
func (u *units) latest(ctx context.Context, token string) ([]byte, error) {
	kv, err := u.handle(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, token)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, jetstream.ErrKeyNotFound
	case err != nil:
		u.forget(kv) // the bucket may have been deleted and made again; look it up anew next time
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, errNoView
		}
		return nil, err
	}
	return e.Value(), nil
}

// unitReadIdle is the inactive threshold of the consumers units.events reads through: the server removes
// one the bridge could not delete itself (it was cut off, or stopped) after this long.
const unitReadIdle = 30 * time.Second

// unitFetch is the most events one fetch asks for.
const unitFetch = 256

// maxProbes bounds the consumers one units.events read makes to find where the unit's most recent events
// begin, beyond the first two: a search that has not found it by then reads from the latest start it
// found with more events (bounded by the request's timeout, as every read is).
const maxProbes = 40

// events returns the unit's most recent events on P.events.*.<token>, oldest first: at most limit of
// them, and no more than room bytes of data together (counting a comma each), the oldest left out. Data
// that is not JSON (nothing the bridge publishes) is skipped. Everything is bounded by ctx.
//
// It costs what the answer holds, not the unit's history: the events stream allows no direct gets, so
// the events are read through consumers of their subject filter, which the stream's per-subject index
// serves without reading other units' events, and whose NumPending (in the answer that creates one)
// counts the unit's events from the consumer's start on. One from the stream's first event counts them
// all (N); when N is at most 2×limit, they are read from there. Otherwise a search over stream sequences
// finds a start from which the unit has limit to 2×limit events, each step a consumer made at a
// sequence for its count (see tail), and the events are read from there.
func (u *units) events(ctx context.Context, token string, limit, room int) (events [][]byte, skipped int, err error) {
	r := &unitRead{u: u, filter: layout.EventBase(u.prefix) + "*." + token}
	defer r.close()
	all, err := r.probe(ctx, jetstream.DeliverAllPolicy, 0)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, 0, errNoEvents
	}
	if err != nil {
		return nil, 0, err
	}
	from, err := r.tail(ctx, all, uint64(limit))
	if err != nil {
		return nil, 0, err
	}
	r.dropAllBut(from)
	return fetchEvents(ctx, from, limit, room)
}

// unitRead is one units.events read: the consumers it made, each deleted when no longer needed and all
// by close (the server removes one a lost delete left after unitReadIdle).
type unitRead struct {
	u      *units
	filter string // P.events.*.<UNIT>
	made   []probe
	wg     sync.WaitGroup
}

// probe is a consumer of the unit's subject filter: count is the unit's events stored from stream
// sequence start on when it was made.
type probe struct {
	cons  jetstream.Consumer
	name  string
	start uint64
	count uint64
}

// probe makes a consumer of the unit's events delivering by policy (from stream sequence seq with
// DeliverByStartSequencePolicy) and reads its start and count from the answer that created it.
func (r *unitRead) probe(ctx context.Context, policy jetstream.DeliverPolicy, seq uint64) (probe, error) {
	cons, err := r.u.js.CreateConsumer(ctx, r.u.stream, jetstream.ConsumerConfig{
		FilterSubject: r.filter, DeliverPolicy: policy, OptStartSeq: seq, AckPolicy: jetstream.AckNonePolicy,
		MemoryStorage: true, Replicas: 1, InactiveThreshold: unitReadIdle,
		Description: "tracking-bridge units.events: the stored events of one unit",
	})
	if err != nil {
		return probe{}, err
	}
	info := cons.CachedInfo()
	p := probe{cons: cons, name: info.Name, start: info.Delivered.Stream + 1, count: info.NumPending}
	r.made = append(r.made, p)
	return p, nil
}

// tail returns a consumer from whose start the unit has limit to 2×limit events: all, the one from the
// stream's first event, when the unit has no more than 2×limit. Otherwise it searches between all's start
// (more than 2×limit from there) and the unit's last event (one from there) for a start with limit to
// 2×limit. Each step guesses where that many would begin were the unit's events spread evenly between
// the two bounds it has (few steps when they are), and halves the span instead after a guess that did
// not halve it (so that a history of bursts costs at most twice a bisection's steps). After maxProbes
// steps, or when the counts moved under it (events removed or added meanwhile), it returns the latest
// start it found with more than 2×limit, which the fetch reads from, keeping the last limit: from there
// the unit has at most as many events more than from the upper bound as the span between them holds
// sequences, after maxProbes steps no more than a millionth of the stream's.
func (r *unitRead) tail(ctx context.Context, all probe, limit uint64) (probe, error) {
	in := func(p probe) bool { return p.count >= limit && p.count <= 2*limit }
	if all.count <= 2*limit {
		return all, nil
	}
	hi, err := r.probe(ctx, jetstream.DeliverLastPolicy, 0)
	if err != nil {
		return probe{}, err
	}
	if hi.count >= limit { // a limit of 1, or a burst of the unit's events stored meanwhile
		return hi, nil
	}
	lo, halve := all, false
	target := limit + limit/2
	for range maxProbes {
		if hi.start <= lo.start+1 || lo.count <= hi.count {
			break
		}
		span := hi.start - lo.start
		seq := lo.start + span/2
		if !halve {
			seq = lo.start + uint64(float64(span)*float64(lo.count-target)/float64(lo.count-hi.count))
		}
		seq = min(max(seq, lo.start+1), hi.start-1)
		p, err := r.probe(ctx, jetstream.DeliverByStartSequencePolicy, seq)
		if err != nil {
			return probe{}, err
		}
		if in(p) {
			return p, nil
		}
		if p.count > 2*limit {
			lo = p
		} else {
			hi = p
		}
		halve = hi.start-lo.start > span/2
	}
	return lo, nil
}

// dropAllBut deletes, in the background, every consumer made but keep.
func (r *unitRead) dropAllBut(keep probe) {
	for _, p := range r.made {
		if p.name != keep.name {
			r.drop(p.name)
		}
	}
	r.made = []probe{keep}
}

func (r *unitRead) drop(name string) {
	r.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = r.u.js.DeleteConsumer(ctx, r.u.stream, name) // else the server removes it after unitReadIdle
		cancel()
	})
}

// close deletes the consumers left and waits for every delete.
func (r *unitRead) close() {
	for _, p := range r.made {
		r.drop(p.name)
	}
	r.made = nil
	r.wg.Wait()
}

// fetchEvents reads from's events (at most from.count: those stored when it was made) and keeps the
// last limit of them within room bytes, oldest first.
func fetchEvents(ctx context.Context, from probe, limit, room int) (events [][]byte, skipped int, err error) {
	var (
		keep  [][]byte // the most recent, oldest first, from index first
		first int
		bytes int
		got   uint64
	)
	for got < from.count {
		left := min(from.count-got, unitFetch)
		// A fetch ends when it has its count, or its bytes: room plus one message of max_payload beyond
		// it bounds what a read holds at once. It waits at most a second for events that were removed
		// meanwhile (the stream's limits), then ends the read with what it has.
		wait := time.Second
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(d))
		}
		if wait <= 0 {
			return nil, 0, context.DeadlineExceeded
		}
		batch, err := from.cons.Fetch(int(left), jetstream.FetchMaxBytes(2*room+4096), jetstream.FetchMaxWait(wait))
		if err != nil {
			return nil, 0, err
		}
		n := 0
		last := false
		for m := range batch.Messages() {
			n++
			got++
			data := m.Data()
			if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
				last = true
			}
			if !json.Valid(data) {
				skipped++
				continue
			}
			keep = append(keep, data)
			bytes += len(data) + 1
			for len(keep)-first > limit || bytes > room {
				bytes -= len(keep[first]) + 1
				keep[first] = nil
				first++
			}
			if first > 2*limit { // compact, so that a long read holds no more than the kept events
				keep = append([][]byte(nil), keep[first:]...)
				first = 0
			}
		}
		if err := batch.Error(); err != nil { // a fetch that ended by its wait or its bytes is no error
			return nil, 0, err
		}
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		if n == 0 || last {
			break // the rest was removed while reading, or nothing more is stored
		}
	}
	return keep[first:], skipped, nil
}

// envelopeBytes is the size of {"unit":"<token>","events":[]} without its events.
func envelopeBytes(token string) int { return len(`{"unit":"","events":[]}`) + len(token) }

// unitEventsBody renders the reply of units.events.
func unitEventsBody(token string, events [][]byte) []byte {
	n := envelopeBytes(token)
	for _, e := range events {
		n += len(e) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"unit":`...)
	b = strconv.AppendQuote(b, token) // [A-Z0-9] only: quoting changes nothing
	b = append(b, `,"events":[`...)
	for i, e := range events {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, "]}"...)
}

// readUnit answers a units request from NATS within ctx. maxPayload is the NATS server's.
func (s *Service) readUnit(ctx context.Context, ep *endpoint, q unitQuery, timeout time.Duration, maxPayload int) result {
	if ep.Name == layout.OpUnitLatest {
		data, err := s.units.latest(ctx, q.token)
		switch {
		case err == nil && !json.Valid(data):
			return failure(CodeBadAnswer, kindViewNotJSON, fmt.Sprintf("the units view's value for unit %s is not JSON", q.token))
		case err == nil:
			return result{code: ep.Success, ok: true, body: data, unit: q.token}
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return failure(CodeNotFound, kindNoUnitEvent, fmt.Sprintf("the units view has no event of unit %s (%s as written)",
				q.token, strQuote(q.number)))
		}
		return s.readFailure(err, timeout)
	}
	room := maxPayload - envelopeBytes(q.token)
	events, skipped, err := s.units.events(ctx, q.token, q.limit, room)
	if err != nil {
		return s.readFailure(err, timeout)
	}
	if skipped > 0 {
		if ok, n := s.limit.Allow("units_not_json"); ok {
			s.log.Warn("stored events that are not JSON left out of a units.events reply", "stream", s.units.stream,
				"unit", q.token, "left_out", skipped, "suppressed", n)
		}
	}
	return result{code: ep.Success, ok: true, body: unitEventsBody(q.token, events)}
}

// readFailure maps a failed read from NATS.
func (s *Service) readFailure(err error, timeout time.Duration) result {
	switch {
	case errors.Is(err, errNoView):
		return failure(CodeUnavailable, kindNoView, fmt.Sprintf("the units view is not available: the bucket %s does not exist "+
			"(BRIDGE_UNITS_VIEW is false on every bridge, or no bridge has created it yet)", s.units.bucket))
	case errors.Is(err, errNoEvents):
		return failure(CodeUnavailable, kindNoView, fmt.Sprintf("the events stream %s does not exist", s.units.stream))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, jetstream.ErrNoHeartbeat), errors.Is(err, nats.ErrTimeout):
		return failure(CodeTimeout, kindNATSTimeout, fmt.Sprintf("NATS did not answer the read within %v", timeout))
	case errors.Is(err, context.Canceled):
		return failure(CodeUnavailable, kindShutdown, "the bridge is shutting down; the request was abandoned")
	}
	return failure(CodeUnavailable, kindNATS, "reading from NATS failed: "+err.Error())
}
