package upstream

// MaxIdempotencyKeyBytes bounds the Idempotency-Key the bridge sends upstream with a report.
const MaxIdempotencyKeyBytes = 256

// ValidIdempotencyKey reports whether key may be sent upstream as a report's Idempotency-Key header: 1
// to MaxIdempotencyKeyBytes bytes of printable ASCII, so that it is a valid HTTP header value and no
// larger than an upstream would keep, without a space at either end: HTTP drops those (net/http trims
// them as it sends), so "k " would reach the upstream as "k", another report's key, and be answered as
// its repeat. The report consumer and the API service both check keys with it.
func ValidIdempotencyKey(key string) bool {
	if key == "" || len(key) > MaxIdempotencyKeyBytes || key[0] == ' ' || key[len(key)-1] == ' ' {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}
