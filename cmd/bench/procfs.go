package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockTicks is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, sysconf(_SC_CLK_TCK)). It is 100
// on every Linux architecture Go supports.
const ClockTicks = 100

// ProcStat is the part of /proc/<pid>/stat the benchmark uses.
type ProcStat struct {
	Comm  string        // the command name, without the parentheses
	State byte          // R, S, D, Z, ...
	User  time.Duration // utime: CPU time in user mode
	Sys   time.Duration // stime: CPU time in kernel mode
}

// CPU is the process's total CPU time, user and kernel.
func (s ProcStat) CPU() time.Duration { return s.User + s.Sys }

// ParseStat parses the content of /proc/<pid>/stat. The command name may hold spaces and parentheses,
// so the fields are counted from the last ')'.
func ParseStat(b []byte) (ProcStat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return ProcStat{}, errors.New("stat: no (comm) field")
	}
	st := ProcStat{Comm: string(b[open+1 : end])}
	// After ") " come the fields from the third on: state(3) ppid(4) ... utime(14) stime(15).
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 13 {
		return ProcStat{}, fmt.Errorf("stat: %d fields after comm, want at least 13", len(f))
	}
	if len(f[0]) != 1 {
		return ProcStat{}, fmt.Errorf("stat: bad state %q", f[0])
	}
	st.State = f[0][0]
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return ProcStat{}, fmt.Errorf("stat: utime/stime: %w", err)
	}
	st.User = ticks(utime)
	st.Sys = ticks(stime)
	return st, nil
}

func ticks(n uint64) time.Duration { return time.Duration(n) * (time.Second / ClockTicks) }

// ProcMem is the memory part of /proc/<pid>/status, in bytes.
type ProcMem struct {
	RSS     int64 // VmRSS: resident set size now
	PeakRSS int64 // VmHWM: the peak resident set size ("high water mark")
	// RssAnon and RssFile split RSS: anonymous memory (heap, stacks, the runtime's) and pages of mapped
	// files (the binary's own, in the page cache). 0 when the kernel does not show them.
	RssAnon, RssFile int64
}

// ParseStatus parses VmRSS and VmHWM from the content of /proc/<pid>/status. It fails when either is
// missing (a zombie has neither).
func ParseStatus(b []byte) (ProcMem, error) {
	var m ProcMem
	var haveRSS, haveHWM bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch key {
		case "VmRSS":
			dst, haveRSS = &m.RSS, true
		case "VmHWM":
			dst, haveHWM = &m.PeakRSS, true
		case "RssAnon":
			dst = &m.RssAnon
		case "RssFile":
			dst = &m.RssFile
		default:
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return ProcMem{}, fmt.Errorf("status: %s: unexpected value %q", key, strings.TrimSpace(val))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return ProcMem{}, fmt.Errorf("status: %s: %w", key, err)
		}
		*dst = kb << 10
	}
	if err := sc.Err(); err != nil {
		return ProcMem{}, err
	}
	if !haveRSS || !haveHWM {
		return ProcMem{}, errors.New("status: no VmRSS/VmHWM (not a live process?)")
	}
	return m, nil
}

// ReadStat reads /proc/<pid>/stat.
func ReadStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcStat{}, err
	}
	return ParseStat(b)
}

// ReadMem reads the memory figures of /proc/<pid>/status.
func ReadMem(pid int) (ProcMem, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcMem{}, err
	}
	return ParseStatus(b)
}
