package sim

import (
	"math"
	"sort"
	"time"
)

// explicitEvent is a stored log entry: a reported or injected event. It is immutable once appended.
type explicitEvent struct {
	id   string // SSE id; "" = no id: line
	name string // SSE event name
	data []byte
	ref  *reportRef // the tracked unit a reported event belongs to; nil for injected events and reports without an order
}

// segment is a run of consecutive log entries: n generated events, or one explicit event (ex != nil).
type segment struct {
	seq int64     // sequence number of the first entry
	n   int64     // entries
	k   int64     // generator index of the first entry (generated runs)
	t0  time.Time // flood runs: the timestamp of all their events; zero: scheduled timestamps
	ex  *explicitEvent
}

// entry is one log entry as read: a generated event (ex == nil: seq, k, ts) or an explicit one.
type entry struct {
	seq int64
	k   int64
	ts  time.Time
	ex  *explicitEvent
}

// eventLog is one user's ordered event log. Generated events are kept as runs of sequence numbers only,
// so their memory does not grow with their number. All methods must be called with the user's mutex held.
type eventLog struct {
	rate      float64 // generated events per second; < 0 flood; 0 none
	limit     int64   // generated events at most
	retention int64   // retained entries at most

	segs    []segment
	first   int64 // sequence number of the first retained entry
	next    int64 // sequence number the next entry gets
	gen     int64 // generated events so far (the next one's k)
	started bool
	start   time.Time        // generation start (UTC)
	ids     map[string]int64 // ids of retained explicit entries -> sequence number
	form    idForm           // the shape of generated ids
	wake    chan struct{}    // closed when an explicit entry is appended; nil while nobody waits
}

func (l *eventLog) init(o *Options) {
	l.form = newIDForm(o.IDTag)
	l.rate = o.EventRate
	l.limit = int64(o.EventLimit)
	if l.limit <= 0 {
		l.limit = math.MaxInt64
	}
	l.retention = int64(o.Retention)
	l.first, l.next = 1, 1
	l.ids = make(map[string]int64)
}

// startGeneration starts the generator clock at now, the first time only.
func (l *eventLog) startGeneration(now time.Time) {
	if !l.started {
		l.started, l.start = true, now.UTC()
	}
}

// scheduled returns the timestamp of generated event k in rate mode: start + k/rate.
func (l *eventLog) scheduled(k int64) time.Time {
	return l.start.Add(time.Duration(float64(k) * float64(time.Second) / l.rate))
}

// timestamp returns the timestamp of generated event k of run s.
func (l *eventLog) timestamp(s *segment, k int64) time.Time {
	if s.t0.IsZero() {
		return l.scheduled(k)
	}
	return s.t0
}

// catchUp appends the generated events due at now (rate mode).
func (l *eventLog) catchUp(now time.Time) {
	if !l.started || l.rate <= 0 || l.gen >= l.limit {
		return
	}
	el := now.Sub(l.start)
	if el < 0 {
		return
	}
	due := int64(float64(el)*l.rate/float64(time.Second)) + 1 // events 0..due-1 are due, up to rounding
	for due > 0 && l.scheduled(due-1).After(now) {
		due--
	}
	for !l.scheduled(due).After(now) {
		due++
	}
	if due = min(due, l.limit); due > l.gen {
		l.appendGenerated(due-l.gen, time.Time{})
	}
}

// nextDue returns when the next generated event is due (rate mode).
func (l *eventLog) nextDue() (time.Time, bool) {
	if !l.started || l.rate <= 0 || l.gen >= l.limit {
		return time.Time{}, false
	}
	return l.scheduled(l.gen), true
}

// flood appends up to n generated events stamped now, in flood mode.
func (l *eventLog) flood(n int64, now time.Time) {
	if !l.started || l.rate >= 0 {
		return
	}
	if n = min(n, l.limit-l.gen, l.retention); n > 0 { // never more than the reader can still read
		l.appendGenerated(n, now.UTC())
	}
}

// appendGenerated appends the next n generated events, extending the last run when it continues it.
func (l *eventLog) appendGenerated(n int64, t0 time.Time) {
	if last := len(l.segs) - 1; last >= 0 {
		s := &l.segs[last]
		if s.ex == nil && s.t0.Equal(t0) && s.seq+s.n == l.next && s.k+s.n == l.gen {
			s.n += n
			l.gen += n
			l.next += n
			l.trim()
			return
		}
	}
	l.segs = append(l.segs, segment{seq: l.next, n: n, k: l.gen, t0: t0})
	l.gen += n
	l.next += n
	l.trim()
}

// appendExplicit appends ex and returns its sequence number.
func (l *eventLog) appendExplicit(ex *explicitEvent) int64 {
	seq := l.next
	l.segs = append(l.segs, segment{seq: seq, n: 1, ex: ex})
	if ex.id != "" {
		l.ids[ex.id] = seq
	}
	l.next++
	l.trim()
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
	return seq
}

// waitChan returns a channel closed when the next explicit entry is appended.
func (l *eventLog) waitChan() <-chan struct{} {
	if l.wake == nil {
		l.wake = make(chan struct{})
	}
	return l.wake
}

// trim drops the oldest entries beyond the retention bound.
func (l *eventLog) trim() {
	if l.next-l.first <= l.retention {
		return
	}
	l.first = l.next - l.retention
	i := 0
	for ; i < len(l.segs); i++ {
		s := &l.segs[i]
		if s.seq+s.n > l.first {
			if d := l.first - s.seq; d > 0 {
				s.seq, s.k, s.n = s.seq+d, s.k+d, s.n-d
			}
			break
		}
		if s.ex != nil && s.ex.id != "" && l.ids[s.ex.id] == s.seq {
			delete(l.ids, s.ex.id)
		}
		*s = segment{} // let the dropped event be collected
	}
	l.segs = l.segs[i:]
}

// find returns the index of the segment holding seq, or len(l.segs).
func (l *eventLog) find(seq int64) int {
	return sort.Search(len(l.segs), func(i int) bool { return l.segs[i].seq+l.segs[i].n > seq })
}

// read appends to dst up to n entries from sequence number from on (from the first retained entry when
// from is older).
func (l *eventLog) read(from int64, n int, dst []entry) []entry {
	from = max(from, l.first)
	for i := l.find(from); i < len(l.segs) && len(dst) < n; i++ {
		s := &l.segs[i]
		if s.ex != nil {
			dst = append(dst, entry{seq: s.seq, ex: s.ex})
			continue
		}
		for q := max(from, s.seq); q < s.seq+s.n && len(dst) < n; q++ {
			k := s.k + q - s.seq
			dst = append(dst, entry{seq: q, k: k, ts: l.timestamp(s, k)})
		}
	}
	return dst
}

// at returns the retained entry with sequence number seq.
func (l *eventLog) at(seq int64) (entry, bool) {
	if seq < l.first || seq >= l.next {
		return entry{}, false
	}
	e := l.read(seq, 1, nil)
	return e[0], true
}

// resolve returns the sequence number to replay from after the Last-Event-ID id: the entry after it, or
// the first retained entry when id is empty or (known false) not a retained entry's id.
func (l *eventLog) resolve(id string) (from int64, known bool) {
	if id == "" {
		return l.first, true
	}
	seq, ok := l.ids[id]
	if !ok {
		seq, ok = l.form.parse(id)
	}
	if !ok || seq < l.first-1 || seq >= l.next {
		return l.first, false
	}
	return seq + 1, true
}

// recent returns, newest first, up to n retained entries that are generated events of shipment ship
// (none when ship < 0) stamped no later than until, or explicit entries accepted by match.
func (l *eventLog) recent(n, ship int, until time.Time, match func(*explicitEvent) bool) []entry {
	var out []entry
	for i := len(l.segs) - 1; i >= 0 && len(out) < n; i-- {
		s := &l.segs[i]
		if s.ex != nil {
			if match(s.ex) {
				out = append(out, entry{seq: s.seq, ex: s.ex})
			}
			continue
		}
		if ship < 0 {
			continue
		}
		last := s.k + s.n - 1
		k := last - ((last-int64(ship))%numShipments+numShipments)%numShipments
		for ; k >= s.k && len(out) < n; k -= numShipments {
			if ts := l.timestamp(s, k); !ts.After(until) {
				out = append(out, entry{seq: s.seq + k - s.k, k: k, ts: ts})
			}
		}
	}
	return out
}
