#!/usr/bin/env bash
# Builds the e2e suite's kube-apiserver, kube-controller-manager and etcd from the pinned Go modules next to this script
# into OUT (default target/e2e/bin), and from kube-apiserver's module: patchcost (a webhook's
# JSON Patch applied with the apiserver's own json-patch), hollowkubelet (the v1.37.2 kubelet
# as kubemark runs it, with the health gate and probe period a test needs) and mockcsi (a CSI
# node plugin whose health answers a test changes). Rebuilt only when the pins or those tools
# change: OUT/stamp holds the versions and the checksums of both go.mod/go.sum pairs and of the
# tools' source. The Go build and module caches live under OUT/.. too, so that one cached
# target directory holds everything.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mkdir -p "${1:-target/e2e/bin}" && cd "${1:-target/e2e/bin}" && pwd)"
cache="$(dirname "$out")"

version() { # module go.mod -> the version its go.mod requires
	sed -n "s|^require $1 \(v[^ ]*\)$|\1|p; s|^[[:space:]]*$1 \(v[^ ]*\).*|\1|p" "$2" | head -n 1
}
kube="$(version k8s.io/kubernetes "$here/kube-apiserver/go.mod")"
etcd="$(version go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")"
[ -n "$kube" ] && [ -n "$etcd" ] || { echo "build.sh: no pinned version found" >&2; exit 1; }
stamp="kube-apiserver $kube
etcd $etcd
$(cd "$here" && cat kube-apiserver/go.mod kube-apiserver/go.sum etcd/go.mod etcd/go.sum kube-apiserver/patchcost/*.go kube-apiserver/hollowkubelet/*.go kube-apiserver/mockcsi/*.go | sha256sum)"

if [ -x "$out/kube-apiserver" ] && [ -x "$out/kube-controller-manager" ] && [ -x "$out/etcd" ] && [ -x "$out/patchcost" ] && [ -x "$out/hollowkubelet" ] && [ -x "$out/mockcsi" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "e2e binaries up to date: kube-apiserver $kube, etcd $etcd"
	exit 0
fi
rm -f "$out/stamp"
export GOCACHE="$cache/go-build" GOMODCACHE="$cache/go-mod" GOFLAGS="-mod=readonly -modcacherw"
# kube-apiserver reports the version it was built from only when told (its own build does this).
minor="${kube#v1.}"; minor="${minor%%.*}"
ldflags="-X k8s.io/component-base/version.gitVersion=$kube -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
echo "building kube-apiserver, kube-controller-manager and the hollow kubelet $kube, patchcost, mockcsi and etcd $etcd into $out"
(cd "$here/kube-apiserver" && go build -trimpath -ldflags "$ldflags" -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
# Only its admission-policy status controller runs: it type-checks the native policies.
(cd "$here/kube-apiserver" && go build -trimpath -ldflags "$ldflags" -o "$out/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager)
# In kube-apiserver's module, so that it links the json-patch version the apiserver does.
(cd "$here/kube-apiserver" && go build -trimpath -o "$out/patchcost" ./patchcost)
# From the same module as kube-apiserver, so that the kubelet's packages are the apiserver's and
# most of the build is shared.
(cd "$here/kube-apiserver" && go build -trimpath -ldflags "$ldflags" -o "$out/hollowkubelet" ./hollowkubelet)
(cd "$here/kube-apiserver" && go build -trimpath -o "$out/mockcsi" ./mockcsi)
(cd "$here/etcd" && go build -trimpath -o "$out/etcd" go.etcd.io/etcd/server/v3)
"$out/kube-apiserver" --version
"$out/kube-controller-manager" --version
"$out/etcd" --version | sed -n 1p
printf '%s\n' "$stamp" > "$out/stamp"
