//go:build tools

// Package tools pins helm for the chart tests, in a module of its own so that its Kubernetes
// libraries never move the e2e suite's pins; it is only ever built, never imported.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
