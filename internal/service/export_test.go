package service

// FailureKinds are the words of every kind of failure the last_error of discovery's STATS may show.
var FailureKinds = func() []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = string(k)
	}
	return out
}()
