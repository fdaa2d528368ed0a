#!/usr/bin/env bash
# Builds helm for the chart tests from the pinned Go module in helm/ next to this script into
# OUT (default target/e2e/bin), as build.sh does for the e2e suite's binaries. Rebuilt only when
# the pin changes: OUT/helm.stamp holds the version, the link flags and the checksum of
# helm/go.mod and go.sum.
# The Go build and module caches are build.sh's, under OUT/.., so the two share downloads.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mkdir -p "${1:-target/e2e/bin}" && cd "${1:-target/e2e/bin}" && pwd)"
cache="$(dirname "$out")"

helm="$(sed -n 's|^require helm.sh/helm/v3 \(v[^ ]*\)$|\1|p; s|^[[:space:]]*helm.sh/helm/v3 \(v[^ ]*\).*|\1|p' "$here/helm/go.mod" | head -n 1)"
[ -n "$helm" ] || { echo "build-helm.sh: no pinned helm version found" >&2; exit 1; }

# helm reports the version it was built from, and takes the Kubernetes version of its client
# libraries as the cluster's when none is given (lint, template), only when told: its own
# Makefile sets both.
client="$(sed -n 's|^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*|\1|p' "$here/helm/go.mod" | head -n 1)"
[ -n "$client" ] || { echo "build-helm.sh: no k8s.io/client-go version found" >&2; exit 1; }
ldflags="-X helm.sh/helm/v3/internal/version.version=$helm"
for pkg in lint/rules chartutil; do
	ldflags="$ldflags -X helm.sh/helm/v3/pkg/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/$pkg.k8sVersionMinor=$client"
done
stamp="helm $helm
$ldflags
$(cd "$here" && cat helm/go.mod helm/go.sum | sha256sum)"

if [ -x "$out/helm" ] && [ "$(cat "$out/helm.stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "helm up to date: $helm"
	exit 0
fi
rm -f "$out/helm.stamp"
export GOCACHE="$cache/go-build" GOMODCACHE="$cache/go-mod" GOFLAGS="-mod=readonly -modcacherw"
echo "building helm $helm into $out"
(cd "$here/helm" && go build -trimpath -ldflags "$ldflags" -o "$out/helm" helm.sh/helm/v3/cmd/helm)
"$out/helm" version --short
printf '%s\n' "$stamp" > "$out/helm.stamp"
