package testutil

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// SetParallel makes go test run up to n parallel tests (t.Parallel) of the package at once, unless its
// command line sets -parallel. Call it from TestMain before m.Run.
//
// go test's default is GOMAXPROCS, which a two-core machine makes 2. The end-to-end tests spend most of
// their time waiting (for a lease's TTL, an upstream paced at a few hundred events a second, a timeout
// they check), not computing, so running more of them at once than there are cores shortens a run
// several times over.
func SetParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}

// RunParallel is the TestMain of a package whose tests mostly wait: it runs them up to n at once
// (SetParallel) and exits with their result.
func RunParallel(m *testing.M, n int) {
	SetParallel(n)
	os.Exit(m.Run())
}
