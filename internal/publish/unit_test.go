package publish

import (
	"testing"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
)

func TestUnitOf(t *testing.T) {
	for _, c := range []struct{ data, want string }{
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"msku 123456-7"}}}}`, "MSKU1234567"},
		{`{"id":"x","observation":{"a":1,"observedLoadingUnit":{"loadingUnit":{"type":"C","number":"TGHU7654321"},"b":[1]}}}`, "TGHU7654321"},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"\u006dsku1"}}}}`, "MSKU1"},
		{`{"\u006fbservation":{"observedLoadingUnit":{"loadingUnit":{"number":"A1"}}}}`, "A1"},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":12345}}}}`, layout.NoUnit},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":["A1"]}}}}`, layout.NoUnit},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"--"}}}}`, layout.NoUnit},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":"A1"}}}`, layout.NoUnit},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{}}}}`, layout.NoUnit},
		{`{"number":"A1","loadingUnit":{"number":"B2"}}`, layout.NoUnit},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"A1"}}},"observation":{}}`, layout.NoUnit},
		{`{"observation":{},"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"A1"}}}}`, "A1"},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"A1"}}}`, layout.NoUnit}, // not valid JSON
		{`[]`, layout.NoUnit},
		{``, layout.NoUnit},
	} {
		if got := UnitOf([]byte(c.data)); got != c.want {
			t.Errorf("UnitOf(%s) = %q, want %q", c.data, got, c.want)
		}
	}
}
