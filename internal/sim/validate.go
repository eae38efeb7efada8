package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// checker collects validation messages, so that one answer reports every problem. Messages name the
// property path, e.g. "unit.loadingState is missing".
type checker struct {
	msgs []string
}

func (c *checker) addf(format string, a ...any) { c.msgs = append(c.msgs, fmt.Sprintf(format, a...)) }

func (c *checker) failed() bool { return len(c.msgs) > 0 }

// join returns the path of key below prefix.
func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// value returns m[key], treating a JSON null like an absent property. When the property is required and
// absent, it records "<path> is missing".
func (c *checker) value(m map[string]any, prefix, key string, required bool) (any, bool) {
	v, ok := m[key]
	if !ok || v == nil {
		if required {
			c.addf("%s is missing", join(prefix, key))
		}
		return nil, false
	}
	return v, true
}

// object returns the object property key of m.
func (c *checker) object(m map[string]any, prefix, key string, required bool) (map[string]any, bool) {
	v, ok := c.value(m, prefix, key, required)
	if !ok {
		return nil, false
	}
	o, ok := v.(map[string]any)
	if !ok {
		c.addf("%s must be an object", join(prefix, key))
	}
	return o, ok
}

// str returns the string property key of m; a required string must not be empty.
func (c *checker) str(m map[string]any, prefix, key string, required bool) (string, bool) {
	v, ok := c.value(m, prefix, key, required)
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	switch {
	case !ok:
		c.addf("%s must be a string", join(prefix, key))
	case required && strings.TrimSpace(s) == "":
		c.addf("%s must not be empty", join(prefix, key))
		return s, false
	}
	return s, ok
}

// enum returns the property key of m, which must be one of allowed.
func (c *checker) enum(m map[string]any, prefix, key string, required bool, allowed ...string) (string, bool) {
	s, ok := c.str(m, prefix, key, required)
	if ok && !slices.Contains(allowed, s) {
		c.addf("%s must be one of %s", join(prefix, key), strings.Join(allowed, ", "))
		return s, false
	}
	return s, ok
}

// array returns the array property key of m, of at most max items.
func (c *checker) array(m map[string]any, prefix, key string, max int) ([]any, bool) {
	v, ok := c.value(m, prefix, key, false)
	if !ok {
		return nil, false
	}
	a, ok := v.([]any)
	switch {
	case !ok:
		c.addf("%s must be an array", join(prefix, key))
	case len(a) > max:
		c.addf("%s must have at most %d items", join(prefix, key), max)
	}
	return a, ok
}

// number checks that the property key of m, when present, is a JSON number.
func (c *checker) number(m map[string]any, prefix, key string) {
	if v, ok := c.value(m, prefix, key, false); ok {
		if _, ok := v.(json.Number); !ok {
			c.addf("%s must be a number", join(prefix, key))
		}
	}
}

// double checks that the property key of m, when present, is a JSON number within the range of a double
// (format double, IEEE 754 binary64: 1e400 is not) and returns its value.
func (c *checker) double(m map[string]any, prefix, key string) (float64, bool) {
	v, ok := c.value(m, prefix, key, false)
	if !ok {
		return 0, false
	}
	n, ok := v.(json.Number)
	if !ok {
		c.addf("%s must be a number", join(prefix, key))
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		c.addf("%s must be a number within the range of a double", join(prefix, key))
		return 0, false
	}
	return f, true
}

// doubleIn checks that the property key of m, when present, is a double from lo to hi.
func (c *checker) doubleIn(m map[string]any, prefix, key string, lo, hi float64) {
	if f, ok := c.double(m, prefix, key); ok && (f < lo || f > hi) {
		c.addf("%s must be from %g to %g", join(prefix, key), lo, hi)
	}
}

// integer checks that the property key of m, when present, is a JSON number whose value is an integer in
// the range of an int32 (format int32); 12, -3 and 12.0 are, 1.5 and "12" are not.
func (c *checker) integer(m map[string]any, prefix, key string) {
	v, ok := c.value(m, prefix, key, false)
	if !ok {
		return
	}
	n, ok := v.(json.Number)
	f, err := strconv.ParseFloat(string(n), 64)
	switch {
	case !ok || err != nil && !errors.Is(err, strconv.ErrRange) || f != math.Trunc(f):
		c.addf("%s must be an integer", join(prefix, key))
	case err != nil || f < math.MinInt32 || f > math.MaxInt32:
		c.addf("%s must be an integer from %d to %d", join(prefix, key), math.MinInt32, math.MaxInt32)
	}
}

// sealList checks a seals array: at most 100 objects with a type of the Seal types and a
// string number.
func (c *checker) sealList(m map[string]any, prefix string) {
	a, _ := c.array(m, prefix, "seals", 100)
	for i, v := range a {
		p := fmt.Sprintf("%s[%d]", join(prefix, "seals"), i)
		o, ok := v.(map[string]any)
		if !ok {
			c.addf("%s must be an object", p)
			continue
		}
		c.enum(o, p, "type", false, "OPERATOR", "CUSTOMS", "UNKNOWN")
		c.str(o, p, "number", false)
	}
}

// isJSON reports whether the request declares a JSON body.
func isJSON(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// maxBody bounds request bodies.
const maxBody = 1 << 20

// readBody reads a request body of at most maxBody bytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, fmt.Errorf("body must be at most %d bytes", maxBody)
		}
		return nil, fmt.Errorf("body could not be read: %w", err)
	}
	return buf.Bytes(), nil
}

// decodeObject parses body as one JSON object, numbers kept as json.Number.
func decodeObject(body []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("body is not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, errors.New("body is not valid JSON: data after the top-level value")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("body must be a JSON object")
	}
	return m, nil
}
