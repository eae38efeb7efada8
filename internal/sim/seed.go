package sim

// Location is a master-data location, as served by operation searchLocations and embedded in events.
type Location struct {
	// ID is the opaque location identifier.
	ID string `json:"id"`
	// Designation is the location's name.
	Designation string `json:"designation"`
	// Type is one of the LocationTypes.
	Type string `json:"type"`
	// LocationCode is the UN/LOCODE of the location's city; nil when not applicable.
	LocationCode *string `json:"locationCode"`
	// InternationalPortCode is set for SEAPORT and SEAPORT_TERMINAL locations.
	InternationalPortCode *string `json:"internationalPortCode"`
	// EdifactLocationCode is the terminal code used in EDIFACT messages, where there is one.
	EdifactLocationCode *string `json:"edifactLocationCode"`
	// Address is the physical address.
	Address *Address `json:"address,omitempty"`
	// GeoLocation is the geographic position.
	GeoLocation *GeoLocation `json:"geoLocation,omitempty"`
}

// Address is a postal address.
type Address struct {
	Street     string  `json:"street"`     // street and number
	PostalCode string  `json:"postalCode"` // postal code
	City       string  `json:"city"`       // city
	Country    Country `json:"country"`    // country
}

// Country is a country by UN name and two-character code.
type Country struct {
	Name string `json:"name"` // English name per the UN country code mapping
	Code string `json:"code"` // two-character UN country code
}

// GeoLocation is a geographic position.
type GeoLocation struct {
	Coordinates *Coordinates `json:"coordinates"` // nil when unknown
}

// Coordinates are decimal degrees.
type Coordinates struct {
	Latitude  float64 `json:"latitude"`  // north-south
	Longitude float64 `json:"longitude"` // east-west
}

// Location types.
const (
	TypeOrganisation           = "ORGANISATION"
	TypeAdministrativeTerminal = "ADMINISTRATIVE_TERMINAL"
	TypeOperationalTerminal    = "OPERATIONAL_TERMINAL"
	TypeHinterlandTerminal     = "HINTERLAND_TERMINAL"
	TypeLoadingPlace           = "LOADINGPLACE"
	TypeSeaport                = "SEAPORT"
	TypeSeaportTerminal        = "SEAPORT_TERMINAL"
	TypeUnknown                = "UNKNOWN"
)

// LocationTypes lists the values of Location.Type.
var LocationTypes = []string{
	TypeOrganisation, TypeAdministrativeTerminal, TypeOperationalTerminal, TypeHinterlandTerminal,
	TypeLoadingPlace, TypeSeaport, TypeSeaportTerminal, TypeUnknown,
}

var countryNames = map[string]string{
	"AT": "Austria", "BE": "Belgium", "CH": "Switzerland", "CZ": "Czechia", "DE": "Germany",
	"FR": "France", "HU": "Hungary", "IT": "Italy", "NL": "Netherlands", "PL": "Poland",
	"SE": "Sweden", "SI": "Slovenia",
}

// seedRow is one location of the seed table; empty codes become null.
type seedRow struct {
	id, typ, name, locode, edifact, street, postal, city, cc string
	lat, lon                                                 float64
}

var seedRows = []seedRow{
	// The provider's administrative terminals: the terminalId of booking orders.
	{"L10001", TypeAdministrativeTerminal, "Terminal Duisburg-Ruhrort", "DEDUI", "DUIRT", "Hafenstraße 22", "47119", "Duisburg", "DE", 51.4545, 6.7319},
	{"L10002", TypeAdministrativeTerminal, "Terminal Köln-Niehl", "DECGN", "CGNNH", "Am Niehler Hafen 5", "50735", "Köln", "DE", 50.9905, 6.9712},
	{"L10003", TypeAdministrativeTerminal, "Terminal Mannheim Handelshafen", "DEMHG", "MHGHH", "Werfthallenstraße 12", "68159", "Mannheim", "DE", 49.4932, 8.4508},
	{"L10004", TypeAdministrativeTerminal, "Terminal Nürnberg Hafen", "DENUE", "NUEHF", "Hamburger Straße 60", "90451", "Nürnberg", "DE", 49.4081, 11.0440},
	{"L10005", TypeAdministrativeTerminal, "Terminal München-Riem", "DEMUC", "MUCRI", "Containerstraße 1", "81829", "München", "DE", 48.1318, 11.6880},
	{"L10006", TypeAdministrativeTerminal, "Terminal Frankfurt Osthafen", "DEFRA", "FRAOH", "Lindleystraße 9", "60314", "Frankfurt am Main", "DE", 50.1105, 8.7190},
	{"L10007", TypeAdministrativeTerminal, "Terminal Stuttgart Hafen", "DESTR", "STRHF", "Am Mittelkai 6", "70327", "Stuttgart", "DE", 48.7696, 9.2335},
	{"L10008", TypeAdministrativeTerminal, "Terminal Leipzig-Wahren", "DELEJ", "LEJWA", "Pittlerstraße 28", "04159", "Leipzig", "DE", 51.3752, 12.3196},
	{"L10009", TypeAdministrativeTerminal, "Terminal Hannover-Linden", "DEHAJ", "HAJLI", "Am Lindener Hafen 1", "30453", "Hannover", "DE", 52.3655, 9.6905},
	{"L10010", TypeAdministrativeTerminal, "Terminal Wien Freudenau", "ATVIE", "VIEFR", "Freudenauer Hafenstraße 8", "1020", "Wien", "AT", 48.1820, 16.4625},

	// The provider's operational terminals.
	{"L20001", TypeOperationalTerminal, "Duisburg Logport I Gate Nord", "DEDUI", "DUILP1", "Logport-Allee 30", "47229", "Duisburg", "DE", 51.3755, 6.7009},
	{"L20002", TypeOperationalTerminal, "Duisburg-Ruhrort Kai 3", "DEDUI", "DUIRK3", "Hafenstraße 28", "47119", "Duisburg", "DE", 51.4560, 6.7345},
	{"L20003", TypeOperationalTerminal, "Köln Eifeltor Bahnterminal", "DECGN", "CGNEF", "Eifeltorstraße 1", "50997", "Köln", "DE", 50.8960, 6.9330},
	{"L20004", TypeOperationalTerminal, "Mannheim Mühlau Kai", "DEMHG", "MHGMU", "Rheinvorlandstraße 5", "68159", "Mannheim", "DE", 49.4980, 8.4560},
	{"L20005", TypeOperationalTerminal, "Nürnberg Trimodal Kai 1", "DENUE", "NUETT", "Rotterdamer Straße 2", "90451", "Nürnberg", "DE", 49.4052, 11.0390},
	{"L20006", TypeOperationalTerminal, "München-Riem Gleis 4", "DEMUC", "MUCG4", "Containerstraße 3", "81829", "München", "DE", 48.1325, 11.6921},
	{"L20007", TypeOperationalTerminal, "Frankfurt Osthafen Kai 2", "DEFRA", "FRAOK2", "Hanauer Landstraße 188", "60314", "Frankfurt am Main", "DE", 50.1118, 8.7251},
	{"L20008", TypeOperationalTerminal, "Stuttgart Hafen Bahnterminal", "DESTR", "STRBT", "Hafenbahnstraße 30", "70329", "Stuttgart", "DE", 48.7675, 9.2390},
	{"L20009", TypeOperationalTerminal, "Leipzig-Wahren Umschlaganlage", "DELEJ", "LEJUA", "Pittlerstraße 40", "04159", "Leipzig", "DE", 51.3770, 12.3150},
	{"L20010", TypeOperationalTerminal, "Wien Freudenau Kai 1", "ATVIE", "VIEFK1", "Seitenhafenstraße 15", "1020", "Wien", "AT", 48.1835, 16.4650},

	// Hinterland terminals of other operators.
	{"L30001", TypeHinterlandTerminal, "Container Terminal Venlo", "NLVEN", "VENCT", "Celsiusweg 30", "5928 PR", "Venlo", "NL", 51.3827, 6.1468},
	{"L30002", TypeHinterlandTerminal, "Nijmegen Container Terminal", "NLNIJ", "NIJCT", "Energieweg 50", "6541 CX", "Nijmegen", "NL", 51.8504, 5.8133},
	{"L30003", TypeHinterlandTerminal, "Moerdijk Inland Terminal", "NLMOE", "MOEIT", "Middenweg 12", "4782 PM", "Moerdijk", "NL", 51.6840, 4.5900},
	{"L30004", TypeHinterlandTerminal, "Liège Trilogiport Terminal", "BELGG", "LGGTR", "Rue de l'Aîte 10", "4684", "Oupeye", "BE", 50.7000, 5.6380},
	{"L30005", TypeHinterlandTerminal, "Strasbourg Port du Rhin Terminal Nord", "FRSXB", "SXBPN", "Rue du Port du Rhin 25", "67100", "Strasbourg", "FR", 48.5910, 7.7890},
	{"L30006", TypeHinterlandTerminal, "Basel Kleinhüningen Terminal", "CHBSL", "BSLKH", "Westquaistrasse 2", "4057", "Basel", "CH", 47.5870, 7.5920},
	{"L30007", TypeHinterlandTerminal, "Linz Container Terminal", "ATLNZ", "LNZCT", "Regensburger Straße 3", "4020", "Linz", "AT", 48.3125, 14.3080},
	{"L30008", TypeHinterlandTerminal, "Budapest BILK Terminal", "HUBUD", "BUDBK", "Európa utca 4", "1239", "Budapest", "HU", 47.3800, 19.1300},
	{"L30009", TypeHinterlandTerminal, "Praha Uhříněves Terminal", "CZPRG", "PRGUH", "Přátelství 986", "104 00", "Praha", "CZ", 50.0360, 14.5950},
	{"L30010", TypeHinterlandTerminal, "Poznań Gądki Terminal", "PLPOZ", "POZGD", "ul. Magazynowa 10", "62-023", "Gądki", "PL", 52.3130, 17.0360},
	{"L30011", TypeHinterlandTerminal, "Verona Quadrante Europa Terminal", "ITVRN", "VRNQE", "Via Sommacampagna 61", "37137", "Verona", "IT", 45.4180, 10.9470},
	{"L30012", TypeHinterlandTerminal, "Milano Segrate Terminal", "ITMIL", "MILSG", "Via Cassanese 200", "20054", "Segrate", "IT", 45.4930, 9.2980},

	// Seaports.
	{"L40001", TypeSeaport, "Port of Hamburg", "DEHAM", "", "Bei St. Annen 1", "20457", "Hamburg", "DE", 53.5450, 9.9660},
	{"L40002", TypeSeaport, "Port of Bremerhaven", "DEBRV", "", "Barkhausenstraße 2", "27568", "Bremerhaven", "DE", 53.5560, 8.5700},
	{"L40003", TypeSeaport, "Port of Rotterdam", "NLRTM", "", "Wilhelminakade 909", "3072 AP", "Rotterdam", "NL", 51.9050, 4.4880},
	{"L40004", TypeSeaport, "Port of Antwerp-Bruges", "BEANR", "", "Zaha Hadidplein 1", "2030", "Antwerpen", "BE", 51.2680, 4.4050},
	{"L40005", TypeSeaport, "Port of Amsterdam", "NLAMS", "", "De Ruijterkade 7", "1013 AA", "Amsterdam", "NL", 52.3800, 4.9020},
	{"L40006", TypeSeaport, "Port of Wilhelmshaven", "DEWVN", "", "Pazifik 1", "26388", "Wilhelmshaven", "DE", 53.5950, 8.1500},
	{"L40007", TypeSeaport, "Port of Le Havre", "FRLEH", "", "Terre-plein de la Barre", "76600", "Le Havre", "FR", 49.4840, 0.1100},
	{"L40008", TypeSeaport, "Port of Gdańsk", "PLGDN", "", "ul. Zamknięta 18", "80-955", "Gdańsk", "PL", 54.3970, 18.6600},
	{"L40009", TypeSeaport, "Port of Genoa", "ITGOA", "", "Via della Mercanzia 2", "16123", "Genova", "IT", 44.4070, 8.9250},
	{"L40010", TypeSeaport, "Port of Trieste", "ITTRS", "", "Via Karl Ludwig von Bruck 3", "34144", "Trieste", "IT", 45.6440, 13.7600},
	{"L40011", TypeSeaport, "Port of Koper", "SIKOP", "", "Vojkovo nabrežje 38", "6000", "Koper", "SI", 45.5600, 13.7390},
	{"L40012", TypeSeaport, "Port of Gothenburg", "SEGOT", "", "Emigrantvägen 2", "403 38", "Göteborg", "SE", 57.6900, 11.9000},
	{"L40013", TypeSeaport, "Port of Zeebrugge", "BEZEE", "", "Isabellalaan 1", "8380", "Zeebrugge", "BE", 51.3300, 3.2000},

	// Seaport terminals.
	{"L50001", TypeSeaportTerminal, "Container Terminal Altenwerder", "DEHAM", "CTA", "Am Ballinkai 1", "21129", "Hamburg", "DE", 53.5000, 9.9400},
	{"L50002", TypeSeaportTerminal, "Container Terminal Burchardkai", "DEHAM", "CTB", "Bubendeyweg 33", "21129", "Hamburg", "DE", 53.5370, 9.9150},
	{"L50003", TypeSeaportTerminal, "Container Terminal Tollerort", "DEHAM", "CTT", "Am Vulkanhafen 2", "20457", "Hamburg", "DE", 53.5440, 9.9480},
	{"L50004", TypeSeaportTerminal, "Eurogate Container Terminal Hamburg", "DEHAM", "EGH", "Kurt-Eckelmann-Straße 1", "21129", "Hamburg", "DE", 53.5220, 9.9130},
	{"L50005", TypeSeaportTerminal, "North Sea Terminal Bremerhaven", "DEBRV", "NTB", "Senator-Borttscheller-Straße 1", "27568", "Bremerhaven", "DE", 53.5830, 8.5300},
	{"L50006", TypeSeaportTerminal, "Eurogate Container Terminal Bremerhaven", "DEBRV", "EGB", "Senator-Borttscheller-Straße 9", "27568", "Bremerhaven", "DE", 53.5700, 8.5400},
	{"L50007", TypeSeaportTerminal, "ECT Delta Terminal", "NLRTM", "ECTDELTA", "Europaweg 875", "3199 LD", "Maasvlakte Rotterdam", "NL", 51.9660, 4.0450},
	{"L50008", TypeSeaportTerminal, "APM Terminals Maasvlakte II", "NLRTM", "APMII", "Europaweg 910", "3199 LC", "Maasvlakte Rotterdam", "NL", 51.9560, 4.0120},
	{"L50009", TypeSeaportTerminal, "Rotterdam World Gateway", "NLRTM", "RWG", "Amoerweg 50", "3199 KD", "Maasvlakte Rotterdam", "NL", 51.9500, 4.0200},
	{"L50010", TypeSeaportTerminal, "MPET Deurganckdok", "BEANR", "MPET", "Sint-Antoniusweg 100", "9130", "Beveren", "BE", 51.2890, 4.2480},
	{"L50011", TypeSeaportTerminal, "PSA Europa Terminal", "BEANR", "PSAEUR", "Kaai 869", "2030", "Antwerpen", "BE", 51.3290, 4.3000},
	{"L50012", TypeSeaportTerminal, "Eurogate Container Terminal Wilhelmshaven", "DEWVN", "CTW", "Pazifik 3", "26388", "Wilhelmshaven", "DE", 53.5900, 8.1550},
	{"L50013", TypeSeaportTerminal, "Terminal de France", "FRLEH", "TDF", "Route du Môle Central", "76600", "Le Havre", "FR", 49.4690, 0.1650},
	{"L50014", TypeSeaportTerminal, "Baltic Hub Gdańsk", "PLGDN", "BHG", "ul. Kontenerowa 7", "80-601", "Gdańsk", "PL", 54.3850, 18.7100},

	// Loading places: where units are stuffed and stripped.
	{"L60001", TypeLoadingPlace, "Lager Logport Ost Halle 4", "DEDUI", "", "Gaterweg 12", "47229", "Duisburg", "DE", 51.3700, 6.7100},
	{"L60002", TypeLoadingPlace, "Chemiepark Marl Ladestelle Süd", "", "", "Paul-Baumann-Straße 1", "45772", "Marl", "DE", 51.6840, 7.0900},
	{"L60003", TypeLoadingPlace, "Automobilwerk Ingolstadt Versandplatz 7", "", "", "Ettinger Straße 70", "85057", "Ingolstadt", "DE", 48.7810, 11.4160},
	{"L60004", TypeLoadingPlace, "Papierfabrik Plattling Rampe 2", "", "", "Nicolausstraße 8", "94447", "Plattling", "DE", 48.7760, 12.8710},
	{"L60005", TypeLoadingPlace, "Brauerei Radeberg Verladung", "", "", "Dresdener Straße 2", "01454", "Radeberg", "DE", 51.1160, 13.9150},
	{"L60006", TypeLoadingPlace, "Distributiecentrum Venlo Trade Port", "NLVEN", "", "Heierhoevenweg 17", "5928 RN", "Venlo", "NL", 51.4020, 6.1550},
	{"L60007", TypeLoadingPlace, "Stahlwerk Linz Verladeplatz 3", "ATLNZ", "", "Turmstraße 45", "4020", "Linz", "AT", 48.2790, 14.3420},
	{"L60008", TypeLoadingPlace, "Logistikzentrum Bönen Tor 12", "", "", "Rudolf-Diesel-Straße 14", "59199", "Bönen", "DE", 51.6000, 7.7600},

	// Organisations.
	{"L70001", TypeOrganisation, "Rheinkontor Spedition GmbH", "DEDUI", "", "Königstraße 51", "47051", "Duisburg", "DE", 51.4330, 6.7650},
	{"L70002", TypeOrganisation, "Hanse Container Logistik GmbH", "DEHAM", "", "Ballindamm 17", "20095", "Hamburg", "DE", 53.5520, 9.9960},
	{"L70003", TypeOrganisation, "Maaskade Forwarding B.V.", "NLRTM", "", "Coolsingel 40", "3011 AD", "Rotterdam", "NL", 51.9220, 4.4790},
	{"L70004", TypeOrganisation, "Scheldt Intermodal NV", "BEANR", "", "Meir 24", "2000", "Antwerpen", "BE", 51.2180, 4.4080},
	{"L70005", TypeOrganisation, "Alpentrans Logistik GmbH", "ATVIE", "", "Mariahilfer Straße 77", "1060", "Wien", "AT", 48.1970, 16.3470},
	{"L70006", TypeOrganisation, "Isar Cargo Service GmbH", "DEMUC", "", "Leopoldstraße 120", "80802", "München", "DE", 48.1640, 11.5860},
	{"L70007", TypeOrganisation, "Vistula Freight Sp. z o.o.", "PLWAW", "", "ul. Marszałkowska 89", "00-683", "Warszawa", "PL", 52.2290, 21.0120},
	{"L70008", TypeOrganisation, "Neckar Chemie AG", "DESTR", "", "Königstraße 10", "70173", "Stuttgart", "DE", 48.7790, 9.1780},

	// Locations whose type is not known.
	{"L90001", TypeUnknown, "Depot Emmerich Hafen", "", "", "Hafenstraße 3", "46446", "Emmerich am Rhein", "DE", 51.8300, 6.2400},
	{"L90002", TypeUnknown, "Abstellfläche Kehl Rheinhafen", "", "", "Hafenstraße 19", "77694", "Kehl", "DE", 48.5750, 7.8050},
}

// nullable returns nil for "" and a pointer to s otherwise.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// seedLocations returns a fresh copy of the seed set.
func seedLocations() []Location {
	out := make([]Location, len(seedRows))
	for i, r := range seedRows {
		var port string
		if r.typ == TypeSeaport || r.typ == TypeSeaportTerminal {
			port = r.locode
		}
		out[i] = Location{
			ID: r.id, Designation: r.name, Type: r.typ,
			LocationCode:          nullable(r.locode),
			InternationalPortCode: nullable(port),
			EdifactLocationCode:   nullable(r.edifact),
			Address: &Address{Street: r.street, PostalCode: r.postal, City: r.city,
				Country: Country{Name: countryNames[r.cc], Code: r.cc}},
			GeoLocation: &GeoLocation{Coordinates: &Coordinates{Latitude: r.lat, Longitude: r.lon}},
		}
	}
	return out
}

// Locations returns the seed set of locations served by operation searchLocations, in their served order.
func (s *Server) Locations() []Location {
	return seedLocations()
}
