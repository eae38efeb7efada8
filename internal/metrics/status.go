package metrics

import (
	"net/http"
	"strconv"
)

// codes holds the label of every status code StatusCode renders as a number, made once so that labelling
// a request costs no allocation.
var codes = func() (c [600]string) {
	for i := 100; i < len(c); i++ {
		if http.StatusText(i) != "" {
			c[i] = strconv.Itoa(i)
		} else {
			c[i] = strconv.Itoa(i/100) + "xx"
		}
	}
	return c
}()

// StatusCode renders an HTTP status code as a label value: the number for the codes net/http knows, its
// class ("2xx" … "5xx") for other codes from 100 to 599, and "other" beyond. The values stay a small set
// whatever an upstream answers.
func StatusCode(c int) string {
	if c >= 100 && c < len(codes) {
		return codes[c]
	}
	return "other"
}
