package sim

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Paging of operation searchLocations. The provider bounds pageSize only below (>= 1, default
// 50) and a page's data to 1000 items, so a larger pageSize is accepted: the effective page size, reported in
// pagination.pageSize and used to compute the page's offset, is min(pageSize, maxPageItems).
const (
	defaultPageSize = 50
	maxPageItems    = 1000
)

type pagination struct {
	CurrentPage int `json:"currentPage"`
	PageSize    int `json:"pageSize"`
	Total       int `json:"total"`
}

type paginatedLocations struct {
	Pagination pagination `json:"pagination"`
	Data       []Location `json:"data"`
}

// handleLocations serves operation searchLocations: filter by type and name, then page.
func (s *Server) handleLocations(w http.ResponseWriter, r *http.Request, _ *userState) {
	q := r.URL.Query()
	var c checker
	typ := q.Get("type")
	if typ != "" && !slices.Contains(LocationTypes, typ) {
		c.addf("type must be one of %s", strings.Join(LocationTypes, ", "))
	}
	page := intParam(&c, q.Get("page"), "page", 1, 1)
	size := intParam(&c, q.Get("pageSize"), "pageSize", defaultPageSize, 1)
	if c.failed() {
		writeMessages(w, http.StatusBadRequest, c.msgs...)
		return
	}
	if rejectByDocument(w, r) {
		return
	}
	size = min(size, maxPageItems)
	name := strings.ToLower(q.Get("name"))
	var match []Location
	for i := range s.seed {
		l := &s.seed[i]
		if typ != "" && l.Type != typ {
			continue
		}
		if name != "" && !strings.Contains(strings.ToLower(l.Designation), name) {
			continue
		}
		match = append(match, *l)
	}
	resp := paginatedLocations{
		Pagination: pagination{CurrentPage: page, PageSize: size, Total: len(match)},
		Data:       []Location{},
	}
	if start := (page - 1) * size; start < len(match) && start >= 0 {
		resp.Data = match[start:min(start+size, len(match))]
	}
	writeJSON(w, http.StatusOK, resp)
}

// intParam parses an optional int32 query parameter with a lower bound.
func intParam(c *checker, v, name string, def, lo int) int {
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 32)
	switch {
	case err != nil:
		c.addf("%s must be an integer", name)
	case int(n) < lo:
		c.addf("%s must be at least %d", name, lo)
	default:
		return int(n)
	}
	return def
}
