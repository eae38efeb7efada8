package lease

import "errors"

var (
	// ErrConfig is wrapped by every configuration problem New reports.
	ErrConfig = errors.New("lease: invalid configuration")
	// ErrNoKeyTTL means the bucket exists without per-key TTLs (LimitMarkerTTL), so a lease would never
	// expire: the bucket must be recreated, or edited to set LimitMarkerTTL.
	ErrNoKeyTTL = errors.New("lease: bucket does not allow per-key TTLs")
	// ErrNotHeld means the lease key no longer holds the revision Seize wrote: the hold ran out (its
	// TTL), and another may hold the lease since.
	ErrNotHeld = errors.New("lease: no longer held (its TTL ran out)")
)
