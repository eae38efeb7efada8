package main

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

func TestPercentile(t *testing.T) {
	one := []int{7}
	ten := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, c := range []struct {
		vs   []int
		p    float64
		want int
	}{
		{nil, 50, 0},
		{one, 0, 7}, {one, 50, 7}, {one, 100, 7},
		{ten, 0, 1}, {ten, 10, 1}, {ten, 11, 2}, {ten, 50, 5}, {ten, 90, 9}, {ten, 99, 10}, {ten, 100, 10},
		{hundred, 50, 50}, {hundred, 99, 99}, {hundred, 99.5, 100}, {hundred, 1, 1},
	} {
		if got := Percentile(c.vs, c.p); got != c.want {
			t.Errorf("Percentile(%d values, %v) = %d, want %d", len(c.vs), c.p, got, c.want)
		}
	}
	ds := []time.Duration{time.Microsecond, 2 * time.Microsecond, time.Millisecond}
	if got := Percentile(ds, 50); got != 2*time.Microsecond {
		t.Errorf("durations p50 = %v", got)
	}
}

func TestMedian(t *testing.T) {
	in := []float64{3, 1, 2}
	if got := Median(in); got != 2 {
		t.Errorf("Median odd = %v", got)
	}
	if in[0] != 3 {
		t.Error("Median modified its argument")
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("Median even = %v", got)
	}
	if got := Median(nil); got != 0 {
		t.Errorf("Median empty = %v", got)
	}
}

func TestParseStat(t *testing.T) {
	// The comm field of a process may contain spaces and parentheses.
	line := "4242 (my (odd) prog) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 37 0 0 20 0 5 0 1000 " +
		"123456789 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	st, err := ParseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.Comm != "my (odd) prog" || st.State != 'S' {
		t.Errorf("comm %q state %c", st.Comm, st.State)
	}
	if st.User != 2500*time.Millisecond || st.Sys != 370*time.Millisecond || st.CPU() != 2870*time.Millisecond {
		t.Errorf("user %v sys %v cpu %v", st.User, st.Sys, st.CPU())
	}
	for _, bad := range []string{"", "12 prog S 1", "12 (prog) S 1 2 3", "12 (prog) S 1 2 3 4 5 6 7 8 9 10 x 3"} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q) succeeded", bad)
		}
	}
}

func TestParseStatus(t *testing.T) {
	status := "Name:\tbridge\nState:\tS (sleeping)\nVmPeak:\t 1300000 kB\nVmHWM:\t   20480 kB\n" +
		"VmRSS:\t   10240 kB\nRssAnon:\t    6144 kB\nRssFile:\t    4096 kB\nThreads:\t7\n"
	m, err := ParseStatus([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if m.PeakRSS != 20<<20 || m.RSS != 10<<20 || m.RssAnon != 6<<20 || m.RssFile != 4<<20 {
		t.Errorf("got %+v", m)
	}
	if _, err := ParseStatus([]byte("Name:\tzombie\nState:\tZ (zombie)\n")); err == nil {
		t.Error("status without VmRSS accepted")
	}
	if _, err := ParseStatus([]byte("VmHWM:\t12 MB\nVmRSS:\t1 kB\n")); err == nil {
		t.Error("unexpected unit accepted")
	}
}

func TestReadSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux only")
	}
	st, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.State == 0 || st.Comm == "" {
		t.Errorf("stat %+v", st)
	}
	m, err := ReadMem(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.PeakRSS < m.RSS {
		t.Errorf("mem %+v", m)
	}
}

func TestRecorder(t *testing.T) {
	base := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	var r Recorder
	ev := func(ms int) []byte {
		return []byte(`{"id":"ev-1","observation":{"timestamp":"2000-01-01T00:00:00Z"},"timestamp":"` +
			base.Add(time.Duration(ms)*time.Millisecond).Format(time.RFC3339Nano) + `","type":"GATE_IN"}`)
	}
	// Warm-up (first second): large latencies that must not count.
	r.Record(base.Add(50*time.Millisecond), ev(0))
	r.Record(base.Add(600*time.Millisecond), ev(500))
	// After the warm-up: latencies 1..100 µs.
	for i := 1; i <= 100; i++ {
		ms := 1000 + i
		r.Record(base.Add(time.Duration(ms)*time.Millisecond+time.Duration(i)*time.Microsecond), ev(ms))
	}
	r.Record(base, []byte(`{"id":"x"}`))
	s := r.Summarize(time.Second)
	if s.Received != 103 || s.Warmup != 2 || s.Bad != 1 || s.Count != 100 {
		t.Fatalf("summary %+v", s)
	}
	if s.Min != time.Microsecond || s.P50 != 50*time.Microsecond || s.P90 != 90*time.Microsecond ||
		s.P99 != 99*time.Microsecond || s.Max != 100*time.Microsecond {
		t.Errorf("summary %+v", s)
	}
	if s.Generated != 99*time.Millisecond {
		t.Errorf("generated span %v", s.Generated)
	}
}

func TestRate(t *testing.T) {
	t0 := time.Now()
	st := jetstream.StreamState{Msgs: 1001, FirstTime: t0, LastTime: t0.Add(2 * time.Second)}
	if got := Rate(st); got != 500 {
		t.Errorf("Rate = %v", got)
	}
	if got := Rate(jetstream.StreamState{Msgs: 1, FirstTime: t0, LastTime: t0}); got != 0 {
		t.Errorf("Rate of one message = %v", got)
	}
}

func TestChild(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process groups and /proc are tested on Linux")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// A child that exits by itself with a status.
	c, err := Start("exit3", exec.Command(sh, "-c", "exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := c.Wait(context.Background())
	if err == nil || u.ExitCode != 3 {
		t.Errorf("exit 3: usage %+v, err %v", u, err)
	}

	// A child stopped with SIGTERM: its process group (the sleep it started too) goes.
	c, err = Start("sleeper", exec.CommandContext(context.Background(), sh, "-c", "sleep 30 & wait"))
	if err != nil {
		t.Fatal(err)
	}
	c.TrackPeakRSS(time.Millisecond)
	testutil.Eventually(t, 2*time.Second, "a VmHWM reading", func() bool { return c.PeakRSS() > 0 })
	start := time.Now()
	u, err = c.Stop(5 * time.Second)
	if err == nil {
		t.Error("a shell killed by SIGTERM should report its exit status")
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("Stop took %v", time.Since(start))
	}
	if u.PeakRSS <= 0 || u.Wall <= 0 {
		t.Errorf("usage %+v", u)
	}
}
