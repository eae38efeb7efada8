package consume

import "testing"

func BenchmarkValidateSmall(b *testing.B) {
	body := report(12345)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if p := Validate(body, 1<<20); p != nil {
			b.Fatal(p)
		}
	}
}
