#!/usr/bin/env bash
# Prints the commit `make semver` compares the published packages with: the last release,
# which is the commit that added the CHANGELOG's newest release heading. While that release
# is being written (its heading not yet committed), HEAD stands for it.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(sed -n 's/^## \[\([0-9][^]]*\)\].*/\1/p' CHANGELOG.md | head -n 1)
[ -n "$version" ] || { echo "CHANGELOG.md names no release" >&2; exit 1; }
# A shallow clone lacks the history that holds the release: fetch it where a remote can give
# it. Without it, the oldest commit at hand stands for the release, which weakens the check
# (said on standard error) but never fails it for want of history.
if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
  git fetch --quiet --unshallow 2>/dev/null ||
    echo "semver: a shallow clone with no history to fetch: comparing with its oldest commit" >&2
fi
commit=$(git log --format=%H -S"## [$version]" -- CHANGELOG.md | tail -n 1)
echo "${commit:-$(git rev-parse HEAD)}"
