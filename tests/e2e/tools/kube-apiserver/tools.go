//go:build tools

// Package tools pins kube-apiserver, and the kube-controller-manager whose admission-policy
// status controller type-checks the native policies, for the e2e suite; it is only ever built,
// never imported.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
