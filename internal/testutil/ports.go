package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// A test that must name a listening port before the listener exists (a cluster node's routes name the
// others' ports; a child process is told where to listen) takes one from FreePort. A port that net.Listen
// on ":0" handed out is the wrong choice: it comes from the kernel's ephemeral range, the same range every
// outgoing connection takes its local port from, so between the check and the bind a client of any test
// running beside it (a NATS client reconnecting every 50 ms, say) can take it, and the server then never
// listens. FreePort picks from the ports below that range, which only listeners ask for by number, and never
// hands out one port twice in a process.

// portsBelow is the lowest port of the kernel's ephemeral range, read once; 32768 when it cannot be read.
var portsBelow = sync.OnceValue(func() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if low, err := strconv.Atoi(f[0]); err == nil && low > minPort+1000 {
				return low
			}
		}
	}
	return 32768
})

// minPort is the lowest port FreePort picks: well above the ports services are commonly configured on.
const minPort = 10000

var (
	portsMu sync.Mutex
	// portsGiven holds every port FreePort returned in this process, so that a stopped cluster node's port
	// is not handed to another test while the node is down.
	portsGiven = map[int]bool{}
)

// FreePort returns a loopback TCP port below the ephemeral range that no one was listening on a moment ago
// and that this process has not handed out before.
func FreePort(tb testing.TB) int {
	tb.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	high := portsBelow()
	for range 1000 {
		p := minPort + rand.IntN(high-minPort)
		if portsGiven[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		_ = ln.Close()
		portsGiven[p] = true
		return p
	}
	tb.Fatalf("no free loopback port between %d and %d", minPort, high)
	return 0
}

// FreeAddr returns "127.0.0.1:port" with a port from FreePort, for a child process that must listen where
// the test knows (an address ending in :0 tells the test nothing).
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(tb))
}

// FreeAddrs returns n distinct addresses as FreeAddr does.
func FreeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = FreeAddr(tb)
	}
	return out
}
