package lease

import "errors"

var (
	// ErrConfig is wrapped by every configuration problem New reports.
	ErrConfig = errors.New("lease: invalid configuration")
	// ErrNoKeyTTL means the bucket exists without per-key TTLs (LimitMarkerTTL), so a lease would never
	// expire: the bucket must be recreated, or edited to set LimitMarkerTTL.
	ErrNoKeyTTL = errors.New("lease: bucket does not allow per-key TTLs")
)
