#!/usr/bin/env bash
# What `make rollout` needs besides the release binary, into OUT (default target/rollout/bin):
# haproxy, Debian's package, installed when it is missing; and the load client, built from the
# Go module next to this script. The load client uses only Go's standard library, so nothing is
# downloaded; Go's build cache lives next to OUT.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mkdir -p "${1:-target/rollout/bin}" && cd "${1:-target/rollout/bin}" && pwd)"

if ! command -v haproxy >/dev/null; then
	as_root=()
	[ "$(id -u)" -eq 0 ] || as_root=(sudo)
	"${as_root[@]}" apt-get install -y -qq haproxy ||
		{ "${as_root[@]}" apt-get update -qq && "${as_root[@]}" apt-get install -y -qq haproxy; }
fi
haproxy -v | sed -n 1p

export GOCACHE="$(dirname "$out")/go-build" GOTOOLCHAIN=local GOFLAGS=-mod=readonly
(cd "$here/loadclient" && go vet . && go build -trimpath -o "$out/loadclient" .)
echo "load client built: $out/loadclient"
