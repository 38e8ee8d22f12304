//go:build tools

// Package tools names the command `make bundle` builds, so `go mod tidy`
// keeps its dependencies.
package tools

import _ "github.com/coredns/coredns"
