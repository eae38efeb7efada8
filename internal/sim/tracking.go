package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
)

// maxTrackedEvents bounds the events of a TrackedUnit.
const maxTrackedEvents = 100

// reportRef is the tracked unit a reported event belongs to, for operation queryTracking.
type reportRef struct {
	ship int       // the unit's index among the shipments of the reporting user, its owner
	ts   time.Time // the event's timestamp
}

// trackedUnit is the TrackedUnit response.
type trackedUnit struct {
	ObservedUntil string            `json:"observedUntil"`
	Order         TrackingOrder     `json:"order"`
	LoadingUnit   any               `json:"loadingUnit,omitempty"`
	Events        []json.RawMessage `json:"events"`
}

// handleTracking serves operation queryTracking: the tracked unit (one of the caller's TrackedOrders) of
// orderId+positionId or of the client reference pair, with its most recent events, oldest first; another
// user's unit is answered 403, an unknown one 404. Events stamped after observedUntil, the time of the
// query, are left out and not counted in the 100-event bound.
func (s *Server) handleTracking(w http.ResponseWriter, r *http.Request, u *userState) {
	q := r.URL.Query()
	oid, pid := q.Get("orderId"), q.Get("positionId")
	cor, cpr := q.Get("clientOrderReference"), q.Get("clientPositionReference")
	var c checker
	if (oid == "") != (pid == "") {
		c.addf("orderId and positionId must be given together")
	}
	if (cor == "") != (cpr == "") {
		c.addf("clientOrderReference and clientPositionReference must be given together")
	}
	if oid == "" && pid == "" && cor == "" && cpr == "" {
		c.addf("either orderId and positionId or clientOrderReference and clientPositionReference must be given")
	}
	if c.failed() {
		writeMessages(w, http.StatusBadRequest, c.msgs...)
		return
	}
	if rejectByDocument(w, r) {
		return
	}
	match := func(o *TrackingOrder) bool {
		return (oid == "" || o.OrderID == oid && o.PositionID == pid) &&
			(cor == "" || o.ClientOrderReference == cor && o.ClientPositionReference == cpr)
	}
	gen := s.generator(u)
	ship, foreign := s.locate(u, match)
	if ship < 0 {
		what := fmt.Sprintf("orderId %s and positionId %s", oid, pid)
		if oid == "" {
			what = fmt.Sprintf("clientOrderReference %s and clientPositionReference %s", cor, cpr)
		}
		if foreign {
			writeMessages(w, http.StatusForbidden, "The tracked unit of "+what+" belongs to another client")
		} else {
			writeMessages(w, http.StatusNotFound, "No tracked unit for "+what)
		}
		return
	}

	now := time.Now()
	u.mu.Lock()
	u.log.catchUp(now)
	hits := u.log.recent(maxTrackedEvents, ship, now, func(ex *explicitEvent) bool {
		return ex.ref != nil && ex.ref.ship == ship && !ex.ref.ts.After(now) // whichever references the report carried
	})
	u.mu.Unlock()

	resp := trackedUnit{
		ObservedUntil: now.UTC().Format(time.RFC3339Nano),
		Order:         gen.ships[ship].order,
		LoadingUnit:   gen.ships[ship].unit,
		Events:        make([]json.RawMessage, 0, len(hits)),
	}
	for i := len(hits) - 1; i >= 0; i-- {
		h := &hits[i]
		if h.ex != nil {
			resp.Events = append(resp.Events, h.ex.data)
		} else {
			resp.Events = append(resp.Events, gen.appendData(nil, h.seq, h.k, h.ts))
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

// locate finds the tracked order position accepted by match: its index among u's shipments, or -1 and
// whether another user's shipment is accepted (foreign).
func (s *Server) locate(u *userState, match func(*TrackingOrder) bool) (ship int, foreign bool) {
	gen := s.generator(u)
	for i := range gen.ships {
		if match(&gen.ships[i].order) {
			return i, false
		}
	}
	for name := range s.opts.Users {
		if name == u.name {
			continue
		}
		g := s.generator(s.user(name))
		for i := range g.ships {
			if match(&g.ships[i].order) {
				return -1, true
			}
		}
	}
	return -1, false
}

// AcceptedReport is a report the simulator accepted (202) and added to the user's event log.
type AcceptedReport struct {
	// EventID is the SSE id the report's event got in the user's log.
	EventID string
	// IdempotencyKey is the request's Idempotency-Key header ("" when absent).
	IdempotencyKey string
	// Body is the request body as received.
	Body []byte
	// Time is when the report was accepted.
	Time time.Time
}

// countReportCall counts every request to the report operation.
func (s *Server) countReportCall(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.stats.add(&s.stats.reportCalls, 1)
		h(w, r)
	}
}

// handleReport serves operation reportTrackingEvent. After the injected faults, the Content-Type check (415)
// and RejectReports, a repeated Idempotency-Key of the user is answered 202 without a new event; otherwise
// the report is validated (400 with every problem) and its event appended to the user's log. Its order must
// be one of the caller's tracked positions (docs/upstream.md#reporting-an-event): another user's is answered
// 403, one nobody tracks 404; a report without an order belongs to no tracked unit.
func (s *Server) handleReport(w http.ResponseWriter, r *http.Request, u *userState) {
	f := s.Faults()
	if s.reportFault(w, r, &f) {
		return
	}
	if !isJSON(r) {
		writeMessages(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeMessages(w, http.StatusBadRequest, err.Error())
		return
	}
	if f.RejectReports != nil {
		if code, msgs, ok := f.RejectReports(body); ok {
			writeMessages(w, code, msgs...)
			return
		}
	}
	key := r.Header.Get("Idempotency-Key")
	if key != "" && s.duplicate(u, key) {
		writeMessages(w, http.StatusAccepted)
		return
	}
	ev, typ, ts, order, msgs := parseReport(body)
	if len(msgs) > 0 {
		writeMessages(w, http.StatusBadRequest, msgs...)
		return
	}
	if rejectByDocument(w, r) {
		return
	}
	// The unit is the one orderId and positionId name, so queryTracking finds the event by either of
	// the unit's reference pairs (a report enriches the query); the report's optional client references are not
	// checked.
	var ref *reportRef
	if order != nil {
		oid, pid := order.OrderID, order.PositionID
		ship, foreign := s.locate(u, func(o *TrackingOrder) bool { return o.OrderID == oid && o.PositionID == pid })
		if ship < 0 {
			if foreign {
				writeMessages(w, http.StatusForbidden, fmt.Sprintf("Order %s position %s belongs to another client", oid, pid))
			} else {
				writeMessages(w, http.StatusNotFound, fmt.Sprintf("No tracked unit for orderId %s and positionId %s", oid, pid))
			}
			return
		}
		ref = &reportRef{ship: ship, ts: ts}
	}

	now := time.Now()
	u.mu.Lock()
	if _, dup := u.idem[key]; key != "" && dup {
		u.mu.Unlock()
		s.stats.add(&s.stats.reportDuplicates, 1)
		writeMessages(w, http.StatusAccepted)
		return
	}
	u.log.catchUp(now)
	id := u.log.form.id(u.log.next)
	ev["id"] = id
	u.log.appendExplicit(&explicitEvent{id: id, name: typ, data: marshalCompact(ev), ref: ref})
	if key != "" {
		u.idem[key] = id
	}
	u.reports = append(u.reports, AcceptedReport{EventID: id, IdempotencyKey: key, Body: body, Time: now})
	if len(u.reports) > s.opts.Retention {
		old := u.reports[0]
		if old.IdempotencyKey != "" && u.idem[old.IdempotencyKey] == old.EventID {
			delete(u.idem, old.IdempotencyKey)
		}
		u.reports[0] = AcceptedReport{}
		u.reports = u.reports[1:]
	}
	u.mu.Unlock()
	s.stats.add(&s.stats.reportsAccepted, 1)
	s.log.Debug("report accepted", "user", u.name, "event_id", id)
	writeMessages(w, http.StatusAccepted)
}

// duplicate reports whether key was already accepted for u, counting it when so.
func (s *Server) duplicate(u *userState, key string) bool {
	u.mu.Lock()
	_, dup := u.idem[key]
	u.mu.Unlock()
	if dup {
		s.stats.add(&s.stats.reportDuplicates, 1)
	}
	return dup
}

// parseReport validates a TrackingEventReport body and returns its event object, the event
// type and timestamp and its order (nil when absent); or every problem found.
//
// The timestamp is "the exact time of the event, in UTC", an RFC 3339 date-time: one with a
// non-zero offset is accepted and converted to UTC, its fraction kept as written (10:15:00.50+01:00
// becomes 09:15:00.50Z), so the stream and queryTracking carry UTC; a UTC one is kept as sent. One that
// cannot be written in UTC with a four-digit year (0000-01-01T00:30:00+01:00) is rejected.
func parseReport(body []byte) (ev map[string]any, typ string, ts time.Time, order *TrackingOrder, msgs []string) {
	m, err := decodeObject(body)
	if err != nil {
		return nil, "", ts, nil, []string{err.Error()}
	}
	var c checker
	ev, ok := c.object(m, "", "event", true)
	if ok {
		c.str(ev, "event", "id", false)
		if s, ok := c.str(ev, "event", "timestamp", true); ok {
			var frac, zone string
			switch ts, frac, zone, ok = rfc3339.Parse(s); {
			case !ok:
				c.addf("event.timestamp must be an RFC 3339 date-time")
			case ts.UTC().Year() < 0 || ts.UTC().Year() > 9999:
				c.addf("event.timestamp must be in the years 0000 to 9999 in UTC")
			case zone != "Z" && zone != "z" && zone != "+00:00" && zone != "-00:00":
				// The exact time of the event, in UTC: the same instant, in UTC.
				ev["timestamp"] = ts.UTC().Format("2006-01-02T15:04:05") + frac + "Z"
			}
		}
		typ, _ = c.str(ev, "event", "type", true)
		if obs, ok := c.object(ev, "event", "observation", false); ok {
			checkObservation(&c, obs, "event.observation")
		}
	}
	if o, ok := c.object(m, "", "order", false); ok {
		order = &TrackingOrder{}
		order.OrderID, _ = c.str(o, "order", "orderId", true)
		order.PositionID, _ = c.str(o, "order", "positionId", true)
		order.ClientOrderReference, _ = c.str(o, "order", "clientOrderReference", false)
		order.ClientPositionReference, _ = c.str(o, "order", "clientPositionReference", false)
	}
	if t, ok := c.object(m, "", "transport", false); ok {
		c.str(t, "transport", "identifier", false)
		c.str(t, "transport", "voyageNumber", false)
	}
	if rp, ok := c.object(m, "", "reporter", false); ok {
		c.str(rp, "reporter", "id", false)
		c.str(rp, "reporter", "name", false)
		if a, ok := c.object(rp, "reporter", "address", false); ok {
			checkAddress(&c, a, "reporter.address")
		}
	}
	if c.failed() {
		return nil, "", ts, nil, c.msgs
	}
	return ev, typ, ts, order, nil
}

// Enumerations of an Observation. Unlike the event type (docs/upstream.md#data-types), these are
// not declared extensible, so other values are rejected.
var (
	modesOfTransport = []string{"BARGE", "RAIL", "TRUCK", "UNKNOWN"}
	containerClasses = []string{"CONTAINER", "SWAP_BODY", "TRAILER", "VEHICLE", "MAFI", "NON_MOBILE", "OTHER"}
	identifications  = []string{"BIC", "ILU", "SOC", "OTHER"}
	loadingStates    = []string{"FULL", "EMPTY", "UNKNOWN"}
	conditions       = []string{"OK", "DAMAGED", "UNKNOWN"}
)

// checkObservation checks an Observation: JSON types, enumeration values, int32
// integers, the location's coordinates and the required fields of its objects (a loading unit's
// containerClass, a location's designation).
func checkObservation(c *checker, obs map[string]any, p string) {
	if mot, ok := c.object(obs, p, "observedMeansOfTransport", false); ok {
		mp := join(p, "observedMeansOfTransport")
		c.enum(mot, mp, "modeOfTransport", false, modesOfTransport...)
		if t, ok := c.object(mot, mp, "truck", false); ok {
			for _, k := range []string{"countryCode", "licensePlate", "forwarder"} {
				c.str(t, mp+".truck", k, false)
			}
		}
		if b, ok := c.object(mot, mp, "barge", false); ok {
			for _, k := range []string{"name", "imo", "eni"} {
				c.str(b, mp+".barge", k, false)
			}
		}
		if t, ok := c.object(mot, mp, "train", false); ok {
			c.str(t, mp+".train", "identifier", false)
		}
	}
	if lu, ok := c.object(obs, p, "observedLoadingUnit", false); ok {
		lp := join(p, "observedLoadingUnit")
		if unit, ok := c.object(lu, lp, "loadingUnit", false); ok {
			c.enum(unit, lp+".loadingUnit", "containerClass", true, containerClasses...)
			c.enum(unit, lp+".loadingUnit", "identification", false, identifications...)
			c.str(unit, lp+".loadingUnit", "number", false)
			c.str(unit, lp+".loadingUnit", "sizeType", false)
		}
		c.enum(lu, lp, "loadingState", false, loadingStates...)
		c.enum(lu, lp, "condition", false, conditions...)
		if wt, ok := c.object(lu, lp, "weight", false); ok {
			for _, k := range []string{"gross", "net", "tare"} {
				c.number(wt, lp+".weight", k)
			}
		}
		if ov, ok := c.object(lu, lp, "oversize", false); ok {
			for _, k := range []string{"excessLengthFront", "excessLengthBack", "excessWidthRight", "excessWidthLeft", "excessHeight"} {
				c.integer(ov, lp+".oversize", k)
			}
		}
		if tp, ok := c.object(lu, lp, "observedTemperature", false); ok {
			c.double(tp, lp+".observedTemperature", "temperature")
			c.double(tp, lp+".observedTemperature", "humidity")
		}
		c.sealList(lu, lp)
	}
	if loc, ok := c.object(obs, p, "location", false); ok {
		lp := join(p, "location")
		c.str(loc, lp, "designation", true)
		for _, k := range []string{"id", "locationCode", "internationalPortCode", "edifactLocationCode"} {
			c.str(loc, lp, k, false)
		}
		c.enum(loc, lp, "type", false, LocationTypes...)
		if a, ok := c.object(loc, lp, "address", false); ok {
			checkAddress(c, a, lp+".address")
		}
		if g, ok := c.object(loc, lp, "geoLocation", false); ok {
			checkGeoLocation(c, g, lp+".geoLocation")
		}
	}
}

// checkGeoLocation checks a GeoLocation: its coordinates, an object or null, hold a latitude
// and a longitude, each a double in decimal degrees, so from -90 (south) to 90 (north) and from -180
// (west) to 180 (east). The document marks neither as required.
func checkGeoLocation(c *checker, g map[string]any, p string) {
	if co, ok := c.object(g, p, "coordinates", false); ok {
		c.doubleIn(co, p+".coordinates", "latitude", -90, 90)
		c.doubleIn(co, p+".coordinates", "longitude", -180, 180)
	}
}

// checkAddress checks an Address: the JSON types of its fields, and that its country's code,
// when given, is a two-character UN country code: two characters, as "DE". Unlike a truck's
// countryCode, it is not said to be left empty when unknown, so "" is not one either.
func checkAddress(c *checker, a map[string]any, p string) {
	for _, k := range []string{"street", "postalCode", "city"} {
		c.str(a, p, k, false)
	}
	if co, ok := c.object(a, p, "country", false); ok {
		c.str(co, p+".country", "name", false)
		if code, ok := c.str(co, p+".country", "code", false); ok && utf8.RuneCountInString(code) != 2 {
			c.addf("%s.country.code must be a two-character UN country code", p)
		}
	}
}

// marshalCompact encodes v as compact JSON without HTML escaping.
func marshalCompact(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // v was decoded from JSON
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// Reports returns the reports accepted for user, oldest first (at most Options.Retention).
func (s *Server) Reports(user string) []AcceptedReport {
	u := s.user(user)
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]AcceptedReport, len(u.reports))
	for i, r := range u.reports {
		r.Body = bytes.Clone(r.Body)
		out[i] = r
	}
	return out
}

// Inject appends an event to user's log: it is streamed (live and in replays) as a message with the
// given id ("" = no id: line), event name ("" = no event: line) and data, which may be any bytes. The
// id should be unique; a client resuming with Last-Event-ID equal to it continues after this event.
// Injected events do not appear in operation queryTracking.
func (s *Server) Inject(user, id, eventName string, data []byte) {
	u := s.user(user)
	ex := &explicitEvent{id: id, name: eventName, data: bytes.Clone(data)}
	u.mu.Lock()
	u.log.catchUp(time.Now())
	u.log.appendExplicit(ex)
	u.mu.Unlock()
}

// GeneratedEvent returns the SSE id and data of the generated event at sequence number seq of user's log
// (the number in its id, see EventID): the same bytes the stream carries and operation queryTracking returns.
// It returns "", nil when that entry is not (yet, or any more) in the log or is a reported or injected event.
// Without reports and injections, the k-th generated event (k from 0) has seq k+1.
func (s *Server) GeneratedEvent(user string, seq int) (id string, data []byte) {
	u := s.user(user)
	u.mu.Lock()
	u.log.catchUp(time.Now())
	e, ok := u.log.at(int64(seq))
	u.mu.Unlock()
	if !ok || e.ex != nil {
		return "", nil
	}
	return u.log.form.id(int64(seq)), s.generator(u).appendData(nil, e.seq, e.k, e.ts)
}

// TrackedOrders returns user's tracked order positions (8 orders of 2 positions): the orders that
// generated events belong to, the tracked units operation queryTracking answers for user, and the only orders
// user may report events for (operation reportTrackingEvent). Generated event k belongs to position k mod 16
// of this list.
func (s *Server) TrackedOrders(user string) []TrackingOrder {
	gen := s.generator(s.user(user))
	out := make([]TrackingOrder, len(gen.ships))
	for i := range gen.ships {
		out[i] = gen.ships[i].order
	}
	return out
}
