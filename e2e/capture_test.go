package e2e

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// flow is one kind of IPv4 packet a capture saw: protocol and the lower
// of its two ports (the service's, as a rule).
type flow struct {
	proto string // "tcp", "udp", or the protocol number
	port  uint16
}

// capture counts the IPv4 packets crossing iface (an AF_PACKET socket
// on it) until stop is called, by flow.
func capture(tb testing.TB, iface string) (stop func() map[flow]int) {
	tb.Helper()
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		tb.Fatalf("capture on %s: %v", iface, err)
	}
	all := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(all))
	if err != nil {
		tb.Fatalf("capture on %s: %v", iface, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: all, Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		tb.Fatalf("capture on %s: %v", iface, err)
	}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000})
	var mu sync.Mutex
	seen := map[flow]int{}
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		buf := make([]byte, 65536)
		for {
			select {
			case <-done:
				return
			default:
			}
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue // the timeout: look at done again
			}
			if f, ok := parseFlow(buf[:n]); ok {
				mu.Lock()
				seen[f]++
				mu.Unlock()
			}
		}
	}()
	var once sync.Once
	stop = func() map[flow]int {
		once.Do(func() {
			close(done)
			<-ended
			unix.Close(fd)
		})
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
	tb.Cleanup(func() { stop() })
	return stop
}

// parseFlow reads an Ethernet frame's IPv4 protocol and lower port.
func parseFlow(frame []byte) (flow, bool) {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:14]) != unix.ETH_P_IP {
		return flow{}, false
	}
	ip := frame[14:]
	ihl := int(ip[0]&0x0f) * 4
	proto := ip[9]
	f := flow{proto: fmt.Sprint(proto)}
	switch proto {
	case unix.IPPROTO_TCP:
		f.proto = "tcp"
	case unix.IPPROTO_UDP:
		f.proto = "udp"
	default:
		return f, true
	}
	if len(ip) < ihl+4 {
		return flow{}, false
	}
	src, dst := binary.BigEndian.Uint16(ip[ihl:]), binary.BigEndian.Uint16(ip[ihl+2:])
	f.port = min(src, dst)
	return f, true
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (f flow) String() string { return fmt.Sprintf("%s/%d", f.proto, f.port) }

// waitQuiet lets packets in flight arrive before a capture stops.
func waitQuiet() { time.Sleep(300 * time.Millisecond) }
