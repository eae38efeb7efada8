package main

// The measurement helpers: process statistics read from /proc and from the rusage of exited children
// (procfs.go), child processes in their own process group (child*.go), percentiles and medians
// (stats.go), end-to-end latency recording (recorder.go), free ports (net.go), and polling a JetStream
// stream until it holds a number of messages (stream.go). They measure; the benchmarks that use them are
// throughput.go, latency.go and profile.go.
