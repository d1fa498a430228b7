//go:build tools

// Package tools pins the etcd server built for the local control plane.
package tools

import _ "go.etcd.io/etcd/server/v3"
