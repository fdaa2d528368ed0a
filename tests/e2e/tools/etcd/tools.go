//go:build tools

// Package tools pins etcd for the e2e suite, in a module of its own: in the apiserver's module
// etcd's requirements would downgrade kubernetes' own.
package tools

import _ "go.etcd.io/etcd/server/v3"
