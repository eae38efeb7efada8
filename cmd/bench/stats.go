package main

import (
	"cmp"
	"math"
	"slices"
)

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted, which must be in ascending order, by
// the nearest-rank method: the smallest value with at least p per cent of the values at or below it. It
// returns the zero value for an empty slice; p ≤ 0 gives the minimum.
func Percentile[T cmp.Ordered](sorted []T, p float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Median returns the median of vs (the mean of the two middle values for an even count), or 0 for none.
// vs is not modified.
func Median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
