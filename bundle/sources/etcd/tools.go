//go:build tools

// Package tools names the commands `make bundle` builds, so `go mod tidy`
// keeps their dependencies.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
