package mesh_test

import (
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkMesh measures what the mesh costs between two namespaces
// joined by a veth: TCP throughput (64 MiB) and round-trip time (2,000
// one-byte echoes), to the peer's own address and to its mesh address, in
// one run. The mesh runs as by default (auto: the kernel's WireGuard
// where the kernel has it, else userspace); the log says which.
func BenchmarkMesh(b *testing.B) {
	p := startPair(b)
	p.setPeers(p.a, p.b)
	p.setPeers(p.b, p.a)
	var sink, echo net.Listener
	inNetns(b, p.b.ns, func() {
		var err error
		if sink, err = net.Listen("tcp", ":7001"); err != nil {
			b.Fatal(err)
		}
		if echo, err = net.Listen("tcp", ":7002"); err != nil {
			b.Fatal(err)
		}
	})
	defer sink.Close()
	defer echo.Close()
	serve(sink, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	serve(echo, func(c net.Conn) { _, _ = io.Copy(c, c) })
	dial := func(addr string) net.Conn {
		var c net.Conn
		deadline := time.Now().Add(15 * time.Second)
		for c == nil {
			inNetns(b, p.a.ns, func() { c, _ = net.DialTimeout("tcp", addr, time.Second) })
			if c == nil && time.Now().After(deadline) {
				b.Fatalf("%s never answered", addr)
			}
		}
		return c
	}
	const total, chunk, echoes = 64 << 20, 64 << 10, 2000
	for _, path := range []struct{ name, to string }{{"direct", p.b.addr}, {"mesh", p.b.mesh}} {
		c := dial(path.to + ":7001")
		buf := make([]byte, chunk)
		start := time.Now()
		for sent := 0; sent < total; sent += chunk {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		c.Close()
		mbps := float64(total) / (1 << 20) / time.Since(start).Seconds()

		e := dial(path.to + ":7002")
		rtts := make([]time.Duration, 0, echoes)
		one := []byte{1}
		for range echoes {
			t0 := time.Now()
			if _, err := e.Write(one); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(e, one); err != nil {
				b.Fatal(err)
			}
			rtts = append(rtts, time.Since(t0))
		}
		e.Close()
		slices.Sort(rtts)
		med, p99 := rtts[len(rtts)/2], rtts[len(rtts)*99/100]
		b.ReportMetric(mbps, path.name+"-MiB/s")
		b.ReportMetric(float64(med.Microseconds()), path.name+"-rtt-median-µs")
		b.Logf("%s: %.0f MiB/s, RTT median %s, p99 %s", path.name, mbps, med, p99)
	}
	out := p.a.out.String()
	if i := strings.Index(out, " up at "); i >= 0 {
		b.Logf("%s%s", p.a.iface, strings.SplitN(out[i:], "\n", 2)[0])
	}
}

func serve(l net.Listener, handle func(net.Conn)) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); handle(c) }()
		}
	}()
}
