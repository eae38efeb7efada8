package consume

// kind is the JSON type a field must have.
type kind uint8

const (
	kString   kind = iota + 1
	kDateTime      // a string holding an RFC 3339 date-time
	kNumber
	kInt32
	kObject
	kArray
)

var kindNames = map[kind]string{
	kString:   "a string",
	kDateTime: "a date-time string (RFC 3339)",
	kNumber:   "a number",
	kInt32:    "an integer",
	kObject:   "an object",
	kArray:    "an array",
}

// field describes one field of an object of the spec.
type field struct {
	name     string
	kind     kind
	required bool
	fields   []field // kObject
	elem     *field  // kArray: its items (name unused)
	maxItems int     // kArray; 0 = no limit
}

func str(name string) field              { return field{name: name, kind: kString} }
func num(name string) field              { return field{name: name, kind: kNumber} }
func i32(name string) field              { return field{name: name, kind: kInt32} }
func obj(name string, fs ...field) field { return field{name: name, kind: kObject, fields: fs} }
func (f field) req() field               { f.required = true; return f }
func arr(name string, max int, e field) field {
	return field{name: name, kind: kArray, elem: &e, maxItems: max}
}

// The TrackingEventReport of spec 2.17 and the objects it holds (2.2, 2.6, 2.10–2.17).
var (
	addressSchema = obj("address", str("street"), str("postalCode"), str("city"),
		obj("country", str("name"), str("code")))
	locationSchema = obj("location", str("id"), str("designation"), str("type"), str("locationCode"),
		str("internationalPortCode"), str("edifactLocationCode"), addressSchema,
		obj("geoLocation", obj("coordinates", num("latitude"), num("longitude"))))
	sealSchema         = obj("", str("type"), str("number"))
	loadingUnitSchema  = obj("loadingUnit", str("containerClass"), str("identification"), str("number"), str("sizeType"))
	observedUnitSchema = obj("observedLoadingUnit", loadingUnitSchema, str("loadingState"), str("condition"),
		obj("weight", num("gross"), num("net"), num("tare")),
		obj("oversize", i32("excessLengthFront"), i32("excessLengthBack"), i32("excessWidthRight"),
			i32("excessWidthLeft"), i32("excessHeight")),
		obj("observedTemperature", num("temperature"), num("humidity")),
		arr("seals", 100, sealSchema))
	transportObsSchema = obj("observedMeansOfTransport", str("modeOfTransport"),
		obj("truck", str("countryCode"), str("licensePlate"), str("forwarder")),
		obj("barge", str("name"), str("imo"), str("eni")),
		obj("train", str("identifier")))
	eventSchema = obj("event", str("id"), field{name: "timestamp", kind: kDateTime}.req(), str("type").req(),
		obj("observation", transportObsSchema, observedUnitSchema, locationSchema)).req()
	reportSchema = []field{
		obj("order", str("orderId").req(), str("positionId").req(), str("clientOrderReference"),
			str("clientPositionReference")),
		obj("transport", str("identifier"), str("voyageNumber")),
		eventSchema,
		obj("reporter", str("id"), str("name"), addressSchema),
	}
)
