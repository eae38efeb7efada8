package sim

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"time"
)

// TrackingOrder is the order information of a tracked unit.
type TrackingOrder struct {
	OrderID                            string    `json:"orderId"`                                      // the provider's order id
	PositionID                         string    `json:"positionId"`                                   // position within the order
	ClientOrderReference               string    `json:"clientOrderReference,omitempty"`               // the client's order reference
	ClientPositionReference            string    `json:"clientPositionReference,omitempty"`            // the client's position reference
	AdditionalClientOrderReferences    []string  `json:"additionalClientOrderReferences,omitempty"`    // further order references
	AdditionalClientPositionReferences []string  `json:"additionalClientPositionReferences,omitempty"` // further position references
	Client                             *Operator `json:"client,omitempty"`                             // the client company
}

// Operator is a company.
type Operator struct {
	ID      string   `json:"id"`                // operator id
	Name    string   `json:"name"`              // company name
	Address *Address `json:"address,omitempty"` // company address
}

// LoadingUnitTracking is a tracked loading unit.
type LoadingUnitTracking struct {
	ContainerClass string  `json:"containerClass"` // CONTAINER, SWAP_BODY, TRAILER, …
	Identification *string `json:"identification"` // BIC, ILU, SOC or OTHER
	Number         *string `json:"number"`         // unit number, e.g. an ISO 6346 container number
	SizeType       *string `json:"sizeType"`       // ISO size type, e.g. 45G1
}

// eventTypes are the generated event types; generated event k has type eventTypes[(k/numShipments)%6],
// except every 50th event (k%50 == 49), which is UNKNOWN.
var eventTypes = [...]string{"GATE_IN", "GATE_OUT", "ARRIVED", "DEPARTED", "HANDLING_STARTED", "HANDLING_FINISHED", "UNKNOWN"}

const (
	numShipments = 16 // tracked order positions per user: 8 orders of 2 positions
	unknownEvery = 50
	typeUnknown  = len(eventTypes) - 1
	// dataPrefixLen estimates the bytes of `{"id":"…","timestamp":"…",` in front of a generated body.
	dataPrefixLen = 72
)

// variantOf returns the shipment and the type index of generated event k.
func variantOf(k int64) (ship, typ int) {
	ship = int(k % numShipments)
	if k%unknownEvery == unknownEvery-1 {
		return ship, typeUnknown
	}
	return ship, int((k / numShipments) % int64(typeUnknown))
}

// shipment is one tracked order position of a user, the subject of generated events.
type shipment struct {
	order        TrackingOrder
	unit         LoadingUnitTracking
	loadingState string
	reefer       bool
	tare, cargo  float64
	mainMode     string // BARGE or RAIL
	truck        *truckObs
	barge        *bargeObs
	train        *trainObs
	seals        []seal
}

// generator computes a user's generated events. It is immutable once built, so it is used without locks.
type generator struct {
	form  idForm
	ships []shipment
	// bodies[ship][typ] is the generated data after `{"id":"…","timestamp":"…",`: from `"type":` to the
	// closing brace. Precomputed so that rendering an event only appends bytes.
	bodies [numShipments][len(eventTypes)][]byte
}

// newGenerator builds the generator of user; its content depends only on user, size and the seed set.
func newGenerator(user string, size int, seed []Location, form idForm) *generator {
	h := fnv.New64a()
	h.Write([]byte(user))
	hv := h.Sum64()
	g := &generator{form: form, ships: makeShipments(hv, seed)}
	var byType = map[string][]*Location{}
	for i := range seed {
		byType[seed[i].Type] = append(byType[seed[i].Type], &seed[i])
	}
	for j := range g.ships {
		for t := range eventTypes {
			loc := pickLocation(byType, t, hv, j)
			g.bodies[j][t] = buildBody(&g.ships[j], t, loc, size)
		}
	}
	return g
}

// name returns the event name (type) of generated event k.
func (g *generator) name(k int64) string {
	_, t := variantOf(k)
	return eventTypes[t]
}

// appendData appends the data of generated event k at log position seq with timestamp ts (UTC).
func (g *generator) appendData(dst []byte, seq, k int64, ts time.Time) []byte {
	j, t := variantOf(k)
	dst = append(dst, `{"id":"`...)
	dst = g.form.append(dst, seq)
	dst = append(dst, `","timestamp":"`...)
	dst = ts.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `",`...)
	return append(dst, g.bodies[j][t]...)
}

// appendMessage appends the whole SSE message of generated event k: the same bytes appendEvent makes of
// its id, name and data (generated data holds no line break), without the intermediate copy.
func (g *generator) appendMessage(dst []byte, seq, k int64, ts time.Time) []byte {
	dst = append(dst, "id: "...)
	dst = g.form.append(dst, seq)
	dst = append(dst, "\nevent: "...)
	dst = append(dst, g.name(k)...)
	dst = append(dst, "\ndata: "...)
	dst = g.appendData(dst, seq, k, ts)
	return append(dst, '\n', '\n')
}

// Parts of shipments, drawn deterministically per user.
var (
	bicOwners   = []string{"MSKU", "MSCU", "HLXU", "CMAU", "TGHU", "OOLU", "SEGU", "TCLU", "BMOU", "FCIU", "CAIU", "TRHU"}
	iluOwners   = []string{"RHEA", "KOMB", "EUCK", "DUSD"}
	sizeTypes   = []string{"22G1", "42G1", "45G1", "45G1", "45R1", "22T1", "L5G1", "42G1"}
	forwarders  = []string{"Rheinkontor Spedition GmbH", "Hanse Container Logistik GmbH", "Maaskade Forwarding B.V.", "Scheldt Intermodal NV", "Alpentrans Logistik GmbH", "Isar Cargo Service GmbH", "Vistula Freight Sp. z o.o."}
	bargeNames  = []string{"MS Lorelei", "MS Nederrijn", "MS Colonia", "MS Amicitia", "MS Rheinfels", "MS Waalhaven", "MS Mosella", "MS Johanna"}
	trainPrefix = []string{"KT", "DGS", "TEC", "IKE"}
	plates      = []struct{ cc, format string }{
		{"DE", "DU-%s %d"}, {"DE", "HH-%s %d"}, {"NL", "%d-%s-7"}, {"PL", "WGM %d%s"}, {"BE", "1-%s-%03d"}, {"AT", "W-%d %s"},
	}
)

// makeShipments draws a user's 16 tracked positions from the user's hash.
func makeShipments(hv uint64, seed []Location) []shipment {
	var orgs []*Location
	for i := range seed {
		if seed[i].Type == TypeOrganisation {
			orgs = append(orgs, &seed[i])
		}
	}
	base := int(hv%8_000_000) + 1_000_000
	ships := make([]shipment, numShipments)
	for j := range ships {
		r := rand.New(rand.NewPCG(hv, uint64(j)/2)) // positions of one order share their order's draws
		orderNo := base + j%8
		pos := j/8 + 1
		org := orgs[(int(hv%97)+j%8)%len(orgs)]
		o := TrackingOrder{
			OrderID:                 fmt.Sprintf("TO%08d", orderNo),
			PositionID:              fmt.Sprintf("%d", pos*10),
			ClientOrderReference:    fmt.Sprintf("PO-%06d", orderNo%1_000_000),
			ClientPositionReference: fmt.Sprintf("PO-%06d/%d", orderNo%1_000_000, pos),
			Client: &Operator{
				ID:      "OP-" + org.ID[1:],
				Name:    org.Designation,
				Address: org.Address,
			},
		}
		if j%3 == 0 {
			o.AdditionalClientOrderReferences = []string{fmt.Sprintf("BKG%09d", r.IntN(1_000_000_000))}
		}
		if j%4 == 1 {
			o.AdditionalClientPositionReferences = []string{fmt.Sprintf("DEL-%05d", r.IntN(100_000))}
		}
		r = rand.New(rand.NewPCG(hv, 1000+uint64(j)))
		sh := shipment{order: o, loadingState: "FULL", mainMode: "BARGE"}
		if j%4 == 3 {
			sh.loadingState = "EMPTY"
		}
		if j%2 == 1 {
			sh.mainMode = "RAIL"
		}
		switch j % 8 {
		case 6:
			sh.unit = unitOf("SWAP_BODY", "ILU", iluNumber(iluOwners[r.IntN(len(iluOwners))], r.IntN(1_000_000)), "")
			sh.tare = 3100
		case 7:
			sh.unit = unitOf("TRAILER", "ILU", iluNumber(iluOwners[r.IntN(len(iluOwners))], r.IntN(1_000_000)), "")
			sh.tare = 6900
		default:
			st := sizeTypes[(j+int(hv%5))%len(sizeTypes)]
			sh.unit = unitOf("CONTAINER", "BIC", bicNumber(bicOwners[r.IntN(len(bicOwners))], r.IntN(1_000_000)), st)
			sh.reefer = st == "45R1"
			sh.tare = 2200
			if st[0] == '4' || st[0] == 'L' {
				sh.tare = 3800
			}
		}
		if sh.loadingState == "FULL" {
			sh.cargo = float64(4000 + r.IntN(22000))
			sh.seals = []seal{{Type: "OPERATOR", Number: fmt.Sprintf("ML-%s%07d", o.Client.Address.Country.Code, r.IntN(10_000_000))}}
			if j%5 == 0 {
				sh.seals = append(sh.seals, seal{Type: "CUSTOMS", Number: fmt.Sprintf("DE%08d", r.IntN(100_000_000))})
			}
		}
		p := plates[r.IntN(len(plates))]
		letters := string(rune('A'+r.IntN(26))) + string(rune('A'+r.IntN(26)))
		var plate string
		if strings.HasPrefix(p.format, "%d") {
			plate = fmt.Sprintf(p.format, 10+r.IntN(89), letters)
		} else {
			plate = fmt.Sprintf(p.format, letters, 100+r.IntN(8900))
		}
		sh.truck = &truckObs{CountryCode: p.cc, LicensePlate: plate, Forwarder: forwarders[r.IntN(len(forwarders))]}
		bn := r.IntN(len(bargeNames))
		sh.barge = &bargeObs{Name: bargeNames[bn], ENI: fmt.Sprintf("0%07d", 2_300_000+r.IntN(700_000))}
		if bn%3 == 0 {
			sh.barge.IMO = imoNumber(900_000 + r.IntN(99_999))
		}
		sh.train = &trainObs{Identifier: fmt.Sprintf("%s %d", trainPrefix[r.IntN(len(trainPrefix))], 40_000+r.IntN(9_999))}
		ships[j] = sh
	}
	return ships
}

func unitOf(class, ident, number, sizeType string) LoadingUnitTracking {
	return LoadingUnitTracking{ContainerClass: class, Identification: nullable(ident), Number: nullable(number), SizeType: nullable(sizeType)}
}

// pickLocation chooses where an event of type index t of shipment j is observed.
func pickLocation(byType map[string][]*Location, t int, hv uint64, j int) *Location {
	var kinds []string
	switch eventTypes[t] {
	case "GATE_IN", "GATE_OUT":
		kinds = []string{TypeOperationalTerminal, TypeHinterlandTerminal}
	case "ARRIVED", "DEPARTED":
		kinds = []string{TypeLoadingPlace, TypeSeaportTerminal}
	default:
		kinds = []string{TypeSeaportTerminal, TypeOperationalTerminal}
	}
	list := byType[kinds[j%2]]
	return list[(int(hv%31)+j*3+t)%len(list)]
}

// JSON shapes of the generated observation.
type (
	genBody struct {
		Type        string      `json:"type"`
		Observation observation `json:"observation"`
		Note        string      `json:"note,omitempty"`
	}
	observation struct {
		MeansOfTransport *motObs   `json:"observedMeansOfTransport,omitempty"`
		LoadingUnit      *luObs    `json:"observedLoadingUnit,omitempty"`
		Location         *Location `json:"location,omitempty"`
	}
	motObs struct {
		Mode  string    `json:"modeOfTransport"`
		Truck *truckObs `json:"truck,omitempty"`
		Barge *bargeObs `json:"barge,omitempty"`
		Train *trainObs `json:"train,omitempty"`
	}
	truckObs struct {
		CountryCode  string `json:"countryCode"`
		LicensePlate string `json:"licensePlate"`
		Forwarder    string `json:"forwarder"`
	}
	bargeObs struct {
		Name string `json:"name"`
		IMO  string `json:"imo,omitempty"`
		ENI  string `json:"eni"`
	}
	trainObs struct {
		Identifier string `json:"identifier"`
	}
	luObs struct {
		LoadingUnit  LoadingUnitTracking `json:"loadingUnit"`
		LoadingState string              `json:"loadingState"`
		Condition    string              `json:"condition"`
		Weight       *weightObs          `json:"weight,omitempty"`
		Temperature  *temperatureObs     `json:"observedTemperature,omitempty"`
		Seals        []seal              `json:"seals,omitempty"`
	}
	weightObs struct {
		Gross float64 `json:"gross"`
		Net   float64 `json:"net"`
		Tare  float64 `json:"tare"`
	}
	temperatureObs struct {
		Temperature float64 `json:"temperature"`
		Humidity    float64 `json:"humidity"`
	}
)

// buildBody renders the data of one (shipment, type) variant, enriched and padded to about size bytes
// in total (with the id and timestamp in front).
func buildBody(sh *shipment, t int, loc *Location, size int) []byte {
	target := size - dataPrefixLen
	mot := &motObs{Mode: "UNKNOWN"}
	switch eventTypes[t] {
	case "GATE_IN", "GATE_OUT":
		mot = &motObs{Mode: "TRUCK", Truck: sh.truck}
	case "UNKNOWN":
	default:
		if sh.mainMode == "BARGE" {
			mot = &motObs{Mode: "BARGE", Barge: sh.barge}
		} else {
			mot = &motObs{Mode: "RAIL", Train: sh.train}
		}
	}
	compact := *loc
	compact.Address, compact.GeoLocation = nil, nil
	b := genBody{
		Type: eventTypes[t],
		Observation: observation{
			MeansOfTransport: mot,
			LoadingUnit:      &luObs{LoadingUnit: sh.unit, LoadingState: sh.loadingState, Condition: "OK"},
			Location:         &compact,
		},
	}
	lu := b.Observation.LoadingUnit
	enrich := []func(){
		func() { lu.Weight = &weightObs{Gross: sh.tare + sh.cargo, Net: sh.cargo, Tare: sh.tare} },
		func() { lu.Seals = sh.seals },
		func() { b.Observation.Location = loc },
		func() {
			if sh.reefer {
				lu.Temperature = &temperatureObs{Temperature: -18, Humidity: 85}
			}
		},
	}
	out := mustMarshal(b)
	for _, f := range enrich {
		saved, savedLoc := *lu, b.Observation.Location
		f()
		if next := mustMarshal(b); len(next) <= target {
			out = next
		} else {
			*lu, b.Observation.Location = saved, savedLoc
		}
	}
	// Pad with further operator seals, then (for sizes beyond 100 seals) with a note.
	if len(out) < target {
		extra := seal{Type: "OPERATOR", Number: "SL-0000000"}
		per := len(mustMarshal(extra)) + 1
		n := min((target-len(out))/per, 100-len(lu.Seals))
		for i := range n {
			lu.Seals = append(lu.Seals, seal{Type: "OPERATOR", Number: fmt.Sprintf("SL-%07d", 4_100_000+i*37)})
		}
		out = mustMarshal(b)
	}
	if len(lu.Seals) == 100 && len(out) < target-20 { // beyond what seals can fill: a free-text note
		const remark = "Unit inspected at the gate, no visible damage, seals intact. "
		n := target - len(out) - len(`,"note":""`)
		b.Note = strings.Repeat(remark, n/len(remark)+1)[:n]
		out = mustMarshal(b)
	}
	return out[1:] // the caller writes the opening brace with id and timestamp
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// iso6346Values are the letter values of the ISO 6346 check digit (multiples of 11 skipped).
var iso6346Values = func() (v [26]int) {
	n := 10
	for i := range v {
		if n%11 == 0 {
			n++
		}
		v[i] = n
		n++
	}
	return v
}()

// checkDigit returns the ISO 6346 check digit of a 4-letter owner code and 6 digits.
func checkDigit(code string) int {
	sum := 0
	for i := 0; i < 10; i++ {
		c := code[i]
		var v int
		if c >= 'A' && c <= 'Z' {
			v = iso6346Values[c-'A']
		} else {
			v = int(c - '0')
		}
		sum += v << i
	}
	return sum % 11 % 10
}

// bicNumber returns a container number (ISO 6346) of owner and serial with its check digit.
func bicNumber(owner string, serial int) string {
	s := fmt.Sprintf("%s%06d", owner, serial)
	return fmt.Sprintf("%s%d", s, checkDigit(s))
}

// iluNumber returns an ILU code (EN 13044) of owner and serial with its check digit.
func iluNumber(owner string, serial int) string { return bicNumber(owner, serial) }

// imoNumber returns a 7-digit IMO ship number for a 6-digit base, with its check digit.
func imoNumber(base int) string {
	s := fmt.Sprintf("%06d", base)
	sum := 0
	for i := range 6 {
		sum += int(s[i]-'0') * (7 - i)
	}
	return fmt.Sprintf("%s%d", s, sum%10)
}
