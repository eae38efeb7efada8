package daemon

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

var updateWaterfall = flag.Bool("update-waterfall", false, "rewrite the trace waterfall in docs/operations.md from this run")

// The waterfall block of docs/operations.md lies between these lines.
const (
	waterfallBegin = "<!-- waterfall: rendered by go test ./internal/daemon -run TestReportTraces -update-waterfall -->"
	waterfallEnd   = "<!-- /waterfall -->"
)

// checkWaterfall renders, as a waterfall, the spans a real OTLP/HTTP collector received for one report
// that carries a producer's traceparent (TestReportTraces'): the report's span in the producer's trace
// with the upstream's POST inside it, and the span of the event the upstream streamed back, in a trace of
// its own linked to the report's. docs/operations.md shows one such rendering; the test fails when the
// spans' names, kinds, nesting or events differ from it (their times differ from run to run), and
// -update-waterfall writes this run's.
func checkWaterfall(t *testing.T, rcv *testutil.OTLPReceiver, report, event testutil.ReceivedSpan) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s: the producer's, continued by the bridge\n", callerTrace)
	renderTrace(&b, rcv, report)
	fmt.Fprintf(&b, "trace %s: the event the upstream streamed back, linked to the report's span\n", event.TraceID)
	renderTrace(&b, rcv, event)
	got := b.String()

	path := filepath.Join("..", "..", "docs", "operations.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(doc), waterfallBegin+"\n```text\n")
	block, after, ok2 := strings.Cut(rest, "```\n"+waterfallEnd)
	if !ok1 || !ok2 {
		t.Fatalf("docs/operations.md has no waterfall block between %q and %q", waterfallBegin, waterfallEnd)
	}
	if *updateWaterfall {
		doc := before + waterfallBegin + "\n```text\n" + got + "```\n" + waterfallEnd + after
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if shape(block) != shape(got) {
		t.Errorf("docs/operations.md's waterfall shows other spans than this run's (rewrite it with -update-waterfall):\n"+
			"docs:\n%s\nthis run:\n%s", block, got)
	}
}

// renderTrace writes root and its descendants as a waterfall: one line a span, indented under its parent,
// with its kind, a bar over the root's time, its start and end in milliseconds from the root's start, and
// its events.
func renderTrace(b *strings.Builder, rcv *testutil.OTLPReceiver, root testutil.ReceivedSpan) {
	const width = 32
	t0, t1 := root.StartUnixNano, max(root.EndNano, root.StartUnixNano+1)
	var walk func(s testutil.ReceivedSpan, depth int)
	walk = func(s testutil.ReceivedSpan, depth int) {
		from := int(float64(s.StartUnixNano-t0) / float64(t1-t0) * width)
		to := max(from+1, int(float64(min(s.EndNano, t1)-t0)/float64(t1-t0)*width))
		bar := strings.Repeat(" ", min(from, width)) + strings.Repeat("█", min(to, width)-min(from, width))
		name := strings.Repeat("  ", depth) + s.Name
		kind := strings.ToLower(strings.TrimPrefix(s.Kind.String(), "SPAN_KIND_"))
		line := fmt.Sprintf("  %-44s %-8s | %-*s %7.2f–%7.2f ms  %s", name, kind, width, bar,
			float64(s.StartUnixNano-t0)/1e6, float64(s.EndNano-t0)/1e6, strings.Join(s.Events, ", "))
		b.WriteString(strings.TrimRight(line, " ") + "\n")
		children := childOf(rcv, s.SpanID)
		slices.SortFunc(children, func(x, y testutil.ReceivedSpan) int { return int(x.StartUnixNano - y.StartUnixNano) })
		for _, c := range children {
			walk(c, depth+1)
		}
	}
	walk(root, 0)
}

// shape is a rendering without what changes from run to run: the trace ids, the bars and the times.
func shape(rendering string) string {
	var out []string
	for line := range strings.Lines(rendering) {
		if strings.HasPrefix(line, "trace ") {
			_, rest, _ := strings.Cut(line, ": ")
			out = append(out, "trace: "+rest)
			continue
		}
		head, tail, _ := strings.Cut(line, " | ")
		_, events, _ := strings.Cut(tail, " ms")
		out = append(out, strings.TrimRight(head, " ")+" | "+strings.TrimSpace(events))
	}
	return strings.Join(out, "\n")
}
