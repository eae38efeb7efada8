package validate

// Report as it was before it was built from the OpenAPI document (then consume.Validate): the walker (now
// the fast path's, fastpath.go) on a hand-written description of the TrackingEventReport schema,
// walkerSchema. It is kept as a
// reference: FuzzValidate compares verdicts and messages with it, and BenchmarkValidate compares costs.
// jsonschema_ref_test.go holds the other reference, the JSON Schema validator the bridge
// used before the fast path.

// validateWalker is Report as it was: the same checks, done by walker against walkerSchema.
func validateWalker(body []byte, maxBytes int) []string {
	if ps := reportBody.prelude(body, maxBytes); ps != nil {
		return ps
	}
	var w walker
	w.path = w.pathBuf[:0]
	notObject, ok := w.run(body, walkerSchema)
	switch {
	case !ok:
		return []string{"the report is not valid JSON: " + syntaxError(body)}
	case notObject != "":
		return []string{"the report must be a JSON object (TrackingEventReport), not " + notObject}
	}
	return w.p.list()
}

func str(name string) field              { return field{name: name, kind: kString} }
func num(name string) field              { return field{name: name, kind: kNumber} }
func i32(name string) field              { return field{name: name, kind: kInt32} }
func obj(name string, fs ...field) field { return field{name: name, kind: kObject, fields: fs} }
func (f field) req() field               { f.required = true; return f }
func arr(name string, max int, e field) field {
	return field{name: name, kind: kArray, elem: &e, maxItems: max}
}

// The TrackingEventReport of api/openapi.yaml and the objects it holds.
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
	walkerSchema = []field{
		obj("order", str("orderId").req(), str("positionId").req(), str("clientOrderReference"),
			str("clientPositionReference")),
		obj("transport", str("identifier"), str("voyageNumber")),
		eventSchema,
		obj("reporter", str("id"), str("name"), addressSchema),
	}
)
