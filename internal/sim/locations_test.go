package sim

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestSeedLocations(t *testing.T) {
	locs := seedLocations()
	if len(locs) < 60 {
		t.Fatalf("%d seed locations, want at least 60", len(locs))
	}
	ids := map[string]bool{}
	types := map[string]int{}
	for _, l := range locs {
		if ids[l.ID] {
			t.Errorf("duplicate id %s", l.ID)
		}
		ids[l.ID] = true
		types[l.Type]++
		port := l.Type == TypeSeaport || l.Type == TypeSeaportTerminal
		if port != (l.InternationalPortCode != nil) {
			t.Errorf("%s (%s): internationalPortCode %v", l.ID, l.Type, l.InternationalPortCode)
		}
		if l.Address == nil || l.Address.Country.Name == "" || l.GeoLocation == nil {
			t.Errorf("%s: incomplete address or position", l.ID)
		}
		if c := l.LocationCode; c != nil && (len(*c) != 5 || (*c)[:2] != l.Address.Country.Code) {
			t.Errorf("%s: UN/LOCODE %s does not fit country %s", l.ID, *c, l.Address.Country.Code)
		}
	}
	for _, typ := range LocationTypes {
		if types[typ] == 0 {
			t.Errorf("no location of type %s", typ)
		}
	}
}

func TestSearchLocations(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	all := len(seedLocations())
	tests := []struct {
		name      string
		query     string
		wantCode  int
		wantTotal int      // -1: do not check
		wantLen   int      // items on the page; -1: do not check
		wantSize  int      // pagination.pageSize; 0: the pageSize asked for, else 50
		wantMsgs  []string // substrings, one per expected message
		check     func(t *testing.T, l Location)
	}{
		{name: "defaults", query: "", wantCode: 200, wantTotal: all, wantLen: 50},
		{name: "second page", query: "?page=2", wantCode: 200, wantTotal: all, wantLen: all - 50},
		{name: "page beyond the end", query: "?page=9", wantCode: 200, wantTotal: all, wantLen: 0},
		{name: "large page", query: "?pageSize=1000", wantCode: 200, wantTotal: all, wantLen: all},
		{name: "small page", query: "?pageSize=7&page=3", wantCode: 200, wantTotal: all, wantLen: 7},
		{name: "type", query: "?type=ADMINISTRATIVE_TERMINAL", wantCode: 200, wantTotal: 10, wantLen: 10,
			check: func(t *testing.T, l Location) {
				if l.Type != TypeAdministrativeTerminal {
					t.Errorf("type %s", l.Type)
				}
			}},
		{name: "name case-insensitive", query: "?name=HAMBURG", wantCode: 200, wantTotal: 2, wantLen: 2,
			check: func(t *testing.T, l Location) {
				if !strings.Contains(strings.ToLower(l.Designation), "hamburg") {
					t.Errorf("designation %s", l.Designation)
				}
			}},
		{name: "type and name", query: "?type=SEAPORT&name=port%20of%20r", wantCode: 200, wantTotal: 1, wantLen: 1},
		{name: "empty name", query: "?name=", wantCode: 200, wantTotal: all, wantLen: 50},
		{name: "no match", query: "?name=atlantis", wantCode: 200, wantTotal: 0, wantLen: 0},
		{name: "unknown type", query: "?type=AIRPORT", wantCode: 400, wantMsgs: []string{"type must be one of"}},
		{name: "page 0", query: "?page=0", wantCode: 400, wantMsgs: []string{"page must be at least 1"}},
		{name: "page not an integer", query: "?page=two", wantCode: 400, wantMsgs: []string{"page must be an integer"}},
		{name: "pageSize 0", query: "?pageSize=0", wantCode: 400, wantMsgs: []string{"pageSize must be at least 1"}},
		{name: "pageSize above the page limit", query: "?pageSize=1001", wantCode: 200, wantTotal: all, wantLen: all, wantSize: 1000},
		{name: "largest pageSize", query: "?pageSize=2147483647&page=2", wantCode: 200, wantTotal: all, wantLen: 0, wantSize: 1000},
		{name: "pageSize beyond int32", query: "?pageSize=99999999999", wantCode: 400, wantMsgs: []string{"pageSize must be an integer"}},
		{name: "every problem at once", query: "?type=x&page=-1&pageSize=1.5", wantCode: 400,
			wantMsgs: []string{"type must be one of", "page must be at least 1", "pageSize must be an integer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("GET", "/locations"+tt.query, tok, nil)
			if r.Status != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", r.Status, tt.wantCode, r.Body)
			}
			if tt.wantCode != 200 {
				msgs := r.messages(t)
				if len(msgs) != len(tt.wantMsgs) {
					t.Fatalf("messages %q, want %d", msgs, len(tt.wantMsgs))
				}
				for i, w := range tt.wantMsgs {
					if !strings.Contains(msgs[i], w) {
						t.Errorf("message %q does not contain %q", msgs[i], w)
					}
				}
				return
			}
			var p struct {
				Pagination struct{ CurrentPage, PageSize, Total int }
				Data       []Location
			}
			if err := json.Unmarshal(r.Body, &p); err != nil || p.Data == nil {
				t.Fatalf("body %s: %v", r.Body, err)
			}
			if p.Pagination.Total != tt.wantTotal || len(p.Data) != tt.wantLen {
				t.Errorf("total %d items %d, want %d and %d", p.Pagination.Total, len(p.Data), tt.wantTotal, tt.wantLen)
			}
			wantSize := tt.wantSize
			if wantSize == 0 {
				wantSize = 50
				if s := regexp.MustCompile(`pageSize=(\d+)`).FindStringSubmatch(tt.query); s != nil {
					wantSize, _ = strconv.Atoi(s[1])
				}
			}
			if p.Pagination.CurrentPage < 1 || p.Pagination.PageSize != wantSize {
				t.Errorf("pagination %+v, want pageSize %d", p.Pagination, wantSize)
			}
			for _, l := range p.Data {
				if tt.check != nil {
					tt.check(t, l)
				}
			}
		})
	}
}
