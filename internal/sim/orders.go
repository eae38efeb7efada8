package sim

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// bookingOrder is the BookingOrder resource.
type bookingOrder struct {
	ID            string                `json:"id,omitempty"`
	TerminalID    string                `json:"terminalId"`
	Action        string                `json:"action"`
	Reference     string                `json:"reference"`
	Unit          bookingUnit           `json:"unit"`
	ClientContext *bookingClientContext `json:"clientContext"`
}

// bookingUnit is the BookingUnit schema.
type bookingUnit struct {
	LoadingState             string  `json:"loadingState"`
	HandlingCode             *string `json:"handlingCode"`
	IsoCode                  *string `json:"isoCode,omitempty"`
	Number                   *string `json:"number"`
	DangerousGoodsIndication string  `json:"dangerousGoodsIndication,omitempty"`
	Condition                string  `json:"condition,omitempty"`
	Seals                    []seal  `json:"seals,omitempty"`
}

// seal is the Seal schema.
type seal struct {
	Type   string `json:"type,omitempty"`
	Number string `json:"number,omitempty"`
}

// bookingClientContext and bookingPlannedDate are the BookingClientContext and BookingPlannedDate
// schemas.
type bookingClientContext struct {
	PlannedDate  *bookingPlannedDate `json:"plannedDate"`
	InternalNote *string             `json:"internalNote"`
}

type bookingPlannedDate struct {
	Date      string `json:"date"`
	TimeOfDay string `json:"timeOfDay,omitempty"`
}

// order is a stored booking order.
type order struct {
	owner   string
	open    bool // no slot request booked from it yet by MarkBooked; see orderStore.isOpen
	created time.Time
	body    bookingOrder
}

// orderStore holds every user's booking orders.
type orderStore struct {
	bookAfter time.Duration // Options.BookAfter

	mu   sync.Mutex
	seq  int
	byID map[string]*order
	ids  []string // creation order
}

func (st *orderStore) init(bookAfter time.Duration) {
	st.bookAfter = bookAfter
	st.byID = make(map[string]*order)
}

// isOpen reports whether no slot request has been booked from o by now: neither MarkBooked nor, with
// Options.BookAfter, the passing of that time since its creation. The caller holds st.mu.
func (st *orderStore) isOpen(o *order, now time.Time) bool {
	return o.open && (st.bookAfter <= 0 || now.Before(o.created.Add(st.bookAfter)))
}

// internalNoteRE is the character set of BookingClientContext.internalNote.
var internalNoteRE = regexp.MustCompile(`^[A-Za-z0-9/#\\-]*$`)

// validateOrder checks a BookingOrder body and reports every problem.
func (s *Server) validateOrder(m map[string]any) []string {
	var c checker
	if id, ok := c.str(m, "", "terminalId", true); ok {
		if l := s.byID[id]; l == nil || l.Type != TypeAdministrativeTerminal {
			c.addf("terminalId %q is not the id of an %s location", id, TypeAdministrativeTerminal)
		}
	}
	c.enum(m, "", "action", true, "PICK_UP", "DROP_OFF")
	c.str(m, "", "reference", true)
	if u, ok := c.object(m, "", "unit", true); ok {
		c.enum(u, "unit", "loadingState", true, loadingStates...)
		hc, _ := c.str(u, "unit", "handlingCode", false)
		ic, _ := c.str(u, "unit", "isoCode", false)
		if strings.TrimSpace(hc) == "" && strings.TrimSpace(ic) == "" { // a blank code gives no unit type
			c.addf("unit.handlingCode or unit.isoCode must be given")
		}
		c.str(u, "unit", "number", false)
		c.enum(u, "unit", "dangerousGoodsIndication", false, "DANGEROUS", "NOT_DANGEROUS", "UNKNOWN")
		c.enum(u, "unit", "condition", false, conditions...)
		c.sealList(u, "unit")
	}
	if cc, ok := c.object(m, "", "clientContext", false); ok {
		if note, ok := c.str(cc, "clientContext", "internalNote", false); ok {
			if utf8.RuneCountInString(note) > 20 {
				c.addf("clientContext.internalNote must be at most 20 characters")
			}
			if !internalNoteRE.MatchString(note) {
				c.addf(`clientContext.internalNote may contain only letters A-Z and a-z, digits, "-", "/", "#" and "\"`)
			}
		}
		if pd, ok := c.object(cc, "clientContext", "plannedDate", false); ok {
			if d, ok := c.str(pd, "clientContext.plannedDate", "date", true); ok {
				if _, err := time.Parse(time.DateOnly, d); err != nil {
					c.addf("clientContext.plannedDate.date must be a date (YYYY-MM-DD)")
				}
			}
			c.enum(pd, "clientContext.plannedDate", "timeOfDay", false, "UNKNOWN", "EARLY", "MIDDAY", "LATE")
		}
	}
	return c.msgs
}

// readOrder reads and validates a BookingOrder request body, answering 415 or 400 itself when it fails.
func (s *Server) readOrder(w http.ResponseWriter, r *http.Request) (bookingOrder, bool) {
	var bo bookingOrder
	if !isJSON(r) {
		writeMessages(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		return bo, false
	}
	body, err := readBody(w, r)
	if err != nil {
		writeMessages(w, http.StatusBadRequest, err.Error())
		return bo, false
	}
	m, err := decodeObject(body)
	if err != nil {
		writeMessages(w, http.StatusBadRequest, err.Error())
		return bo, false
	}
	if msgs := s.validateOrder(m); len(msgs) > 0 {
		writeMessages(w, http.StatusBadRequest, msgs...)
		return bo, false
	}
	if rejectByDocument(w, r) {
		return bo, false
	}
	return orderFromMap(m), true
}

// orderFromMap builds the BookingOrder of a body that validateOrder accepted from the same map, matching
// keys exactly as validateOrder does, so that what is stored is what was validated: json.Unmarshal would
// match keys case-insensitively and store {"action":"PICK_UP","ACTION":"THROW"} as THROW. Other keys,
// case variants and an id included, are ignored.
func orderFromMap(m map[string]any) bookingOrder {
	u, _ := m["unit"].(map[string]any)
	bo := bookingOrder{
		TerminalID: strOf(m, "terminalId"),
		Action:     strOf(m, "action"),
		Reference:  strOf(m, "reference"),
		Unit: bookingUnit{
			LoadingState:             strOf(u, "loadingState"),
			HandlingCode:             optStrOf(u, "handlingCode"),
			IsoCode:                  optStrOf(u, "isoCode"),
			Number:                   optStrOf(u, "number"),
			DangerousGoodsIndication: strOf(u, "dangerousGoodsIndication"),
			Condition:                strOf(u, "condition"),
		},
	}
	seals, _ := u["seals"].([]any)
	for _, v := range seals {
		sm, _ := v.(map[string]any)
		bo.Unit.Seals = append(bo.Unit.Seals, seal{Type: strOf(sm, "type"), Number: strOf(sm, "number")})
	}
	if cc, ok := m["clientContext"].(map[string]any); ok {
		bo.ClientContext = &bookingClientContext{InternalNote: optStrOf(cc, "internalNote")}
		if pd, ok := cc["plannedDate"].(map[string]any); ok {
			bo.ClientContext.PlannedDate = &bookingPlannedDate{Date: strOf(pd, "date"), TimeOfDay: strOf(pd, "timeOfDay")}
		}
	}
	return bo
}

// strOf returns the string property key of m; "" when it is absent, null or not a string.
func strOf(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// optStrOf returns the string property key of m; nil when it is absent, null or not a string.
func optStrOf(m map[string]any, key string) *string {
	if s, ok := m[key].(string); ok {
		return &s
	}
	return nil
}

// handleCreateOrder serves operation createOrder.
func (s *Server) handleCreateOrder(w http.ResponseWriter, r *http.Request, u *userState) {
	bo, ok := s.readOrder(w, r)
	if !ok {
		return
	}
	st := &s.orders
	st.mu.Lock()
	st.seq++
	id := fmt.Sprintf("BO-%08d", st.seq)
	bo.ID = id
	st.byID[id] = &order{owner: u.name, open: true, created: time.Now(), body: bo}
	st.ids = append(st.ids, id)
	st.mu.Unlock()
	s.log.Debug("order created", "user", u.name, "order_id", id)
	w.Header().Set("Location", s.base+"/orders/"+id)
	writeJSON(w, http.StatusCreated, struct {
		ID string `json:"id"`
	}{id})
}

// handleListOrders serves operation listOpenOrders: the ids of the caller's open orders, oldest first.
func (s *Server) handleListOrders(w http.ResponseWriter, _ *http.Request, u *userState) {
	st := &s.orders
	ids := []string{}
	st.mu.Lock()
	now := time.Now()
	for _, id := range st.ids {
		if o := st.byID[id]; o.owner == u.name && st.isOpen(o, now) {
			ids = append(ids, id)
		}
	}
	st.mu.Unlock()
	writeJSON(w, http.StatusOK, struct {
		IDs []string `json:"ids"`
	}{ids})
}

// lookupLocked finds the caller's order id; it returns the failure status and message when the order is
// unknown (404), someone else's (403) or, with needOpen, no longer open (409). The caller holds st.mu.
func (st *orderStore) lookupLocked(id, user string, needOpen bool) (*order, int, string) {
	o := st.byID[id]
	switch {
	case o == nil:
		return nil, http.StatusNotFound, fmt.Sprintf("Order %s not found", id)
	case o.owner != user:
		return nil, http.StatusForbidden, fmt.Sprintf("Order %s belongs to another client", id)
	case needOpen && !st.isOpen(o, time.Now()):
		return nil, http.StatusConflict, fmt.Sprintf("Order %s is no longer open: a slot request has been booked from it", id)
	}
	return o, 0, ""
}

// handleReadOrder serves operation getOrder.
func (s *Server) handleReadOrder(w http.ResponseWriter, r *http.Request, u *userState) {
	st := &s.orders
	st.mu.Lock()
	o, code, msg := st.lookupLocked(r.PathValue("id"), u.name, false)
	var bo bookingOrder
	if o != nil {
		bo = o.body
	}
	st.mu.Unlock()
	if o == nil {
		writeMessages(w, code, msg)
		return
	}
	writeJSON(w, http.StatusOK, bo)
}

// handleUpdateOrder serves operation updateOrder.
func (s *Server) handleUpdateOrder(w http.ResponseWriter, r *http.Request, u *userState) {
	id := r.PathValue("id")
	st := &s.orders
	st.mu.Lock()
	_, code, msg := st.lookupLocked(id, u.name, true)
	st.mu.Unlock()
	if code != 0 {
		writeMessages(w, code, msg)
		return
	}
	bo, ok := s.readOrder(w, r)
	if !ok {
		return
	}
	st.mu.Lock()
	o, code, msg := st.lookupLocked(id, u.name, true) // it may have changed meanwhile
	if o != nil {
		bo.ID = id
		o.body = bo
	}
	st.mu.Unlock()
	if o == nil {
		writeMessages(w, code, msg)
		return
	}
	writeMessages(w, http.StatusOK)
}

// handleDeleteOrder serves operation deleteOrder.
func (s *Server) handleDeleteOrder(w http.ResponseWriter, r *http.Request, u *userState) {
	id := r.PathValue("id")
	st := &s.orders
	st.mu.Lock()
	o, code, msg := st.lookupLocked(id, u.name, true)
	if o != nil {
		delete(st.byID, id)
		st.ids = slices.DeleteFunc(st.ids, func(x string) bool { return x == id })
	}
	st.mu.Unlock()
	if o == nil {
		writeMessages(w, code, msg)
		return
	}
	writeMessages(w, http.StatusOK)
}

// MarkBooked marks the order as no longer open, as if a dispatcher had booked a slot request from it:
// it leaves the list of open orders, and update and delete answer 409. It reports false for an unknown id.
// Options.BookAfter does the same for every order, over time.
func (s *Server) MarkBooked(id string) bool {
	st := &s.orders
	st.mu.Lock()
	defer st.mu.Unlock()
	o := st.byID[id]
	if o != nil {
		o.open = false
	}
	return o != nil
}
