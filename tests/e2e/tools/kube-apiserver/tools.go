//go:build tools

// Package tools pins kube-apiserver for the e2e suite; it is only ever built, never imported.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
