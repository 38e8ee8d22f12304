// Package freeport gives tests loopback ports nothing listens on.
//
// A port is free when asked and may be taken before the test binds it;
// tests that can bind ":0" themselves should.
package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Port is a loopback port nothing listens on now.
func Port(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		tb.Fatal(err)
	}
	return port
}

// Addr is 127.0.0.1 and a Port.
func Addr(tb testing.TB) string {
	tb.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(tb)))
}
