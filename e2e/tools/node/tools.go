//go:build tools

// Package tools pins the Kubernetes node commands built for the real node of the local cluster.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
