// Package bench holds the measurement helpers of cmd/bench: process statistics read from /proc and
// from the rusage of exited children, child processes in their own process group, percentiles and
// medians, end-to-end latency recording, and polling a JetStream stream until it holds a number of
// messages. It measures; it never runs a benchmark by itself, and nothing in the bridge imports it.
package bench
