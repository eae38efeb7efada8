package jsonscan_test

import (
	"fmt"

	"github.com/tracking-bridge/tracking-bridge/internal/jsonscan"
)

// Reading the top-level members an event is routed on, skipping the rest, as the publisher does.
func ExampleScanner_Member() {
	data := []byte(`{"id":"evt-1","observation":{"type":"inner"},"type":"GATE_IN","n":[1,2]}`)
	var s jsonscan.Scanner
	s.Reset(data)
	s.Object()
	for key, esc, ok := s.Member(); ok; key, esc, ok = s.Member() {
		if (jsonscan.Equal(key, esc, "id") || jsonscan.Equal(key, esc, "type")) && s.Kind() == jsonscan.String {
			fmt.Printf("%s = %s\n", key, jsonscan.Unquote(s.String()))
		} else {
			s.Skip()
		}
	}
	if err := s.End(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// id = evt-1
	// type = GATE_IN
}

// A walk directed by a schema: each field must have a kind, and required ones must be there. A report
// validator's fast path has this shape; it gives up (and lets the full validator word the problems) at
// the first one.
func ExampleScanner_Kind() {
	type field struct {
		name     string
		kind     jsonscan.Kind
		required bool
	}
	fields := []field{{"orderId", jsonscan.String, true}, {"seals", jsonscan.Array, false}}
	check := func(body string) error {
		var s jsonscan.Scanner
		s.Reset([]byte(body))
		if !s.Object() {
			return fmt.Errorf("not an object: %v", s.Err())
		}
		seen := map[string]bool{}
		for key, esc, ok := s.Member(); ok; key, esc, ok = s.Member() {
			i := -1
			for n, f := range fields {
				if jsonscan.Equal(key, esc, f.name) {
					i = n
				}
			}
			if i < 0 {
				s.Skip()
				continue
			}
			seen[fields[i].name] = true
			if k := s.Kind(); k != fields[i].kind {
				return fmt.Errorf("%s has the wrong kind", fields[i].name)
			}
			if fields[i].kind == jsonscan.Array {
				s.Array()
				for s.Elem() {
					s.String() // each seal is a string
				}
			} else {
				s.Skip()
			}
		}
		if err := s.End(); err != nil {
			return err
		}
		for _, f := range fields {
			if f.required && !seen[f.name] {
				return fmt.Errorf("%s is missing", f.name)
			}
		}
		return nil
	}
	fmt.Println(check(`{"orderId":"BO-1","seals":["S1","S2"]}`))
	fmt.Println(check(`{"seals":[]}`))
	fmt.Println(check(`{"orderId":"BO-1","seals":["S1",7]}`))
	fmt.Println(check(`{"orderId":"BO-1",}`))
	// Output:
	// <nil>
	// orderId is missing
	// a number at byte 32 where a string was expected
	// invalid JSON at byte 18: invalid character '}' looking for beginning of object key string
}
