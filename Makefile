# The project's entry points; CI runs `.ci/run`, which is `make test`, `make chart`,
# `make conformance`, `make e2e`, then `make rollout`.

CARGO ?= cargo
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
BIN := $(TARGET_DIR)/release/volume-health-webhook
DEV_CA := $(TARGET_DIR)/dev/ca.crt

# Images: `make image CONTAINER=podman REGISTRY=registry.example.com/team TAG=v0.3.0-rc1`. The
# default tag is the workspace version, which the manifests and the chart pin (a test checks).
CONTAINER ?= docker
REGISTRY ?= ghcr.io/volume-health
TAG ?= v$(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
IMAGE ?= $(REGISTRY)/volume-health-webhook:$(TAG)
DOCTOR_IMAGE ?= $(REGISTRY)/csi-globalmount-doctor:$(TAG)

# promtool for the alerting-rule tests: the one on PATH, else the binary from Debian's
# `prometheus` package, unpacked under the target directory (nothing installed or started).
TOOLS := $(TARGET_DIR)/tools
PROMTOOL ?= $(or $(shell command -v promtool),$(abspath $(TOOLS))/usr/bin/promtool)
# cargo-semver-checks for `make semver`, pinned and built from crates.io into the target
# directory.
SEMVER_CHECKS_VERSION := 0.51.0
SEMVER_CHECKS := $(abspath $(TOOLS))/bin/cargo-semver-checks
# valgrind for the instruction-count benchmark, found the same way (Debian's `valgrind`); an
# unpacked one finds its tools through VALGRIND_LIB.
VALGRIND ?= $(or $(shell command -v valgrind),$(abspath $(TOOLS))/usr/bin/valgrind)
VALGRIND_LIB ?= $(if $(filter $(abspath $(TOOLS))/%,$(VALGRIND)),$(abspath $(TOOLS))/usr/libexec/valgrind)

# The apiserver conformance suite CI runs against the release binary; in CI it sits next to
# the checkout. Its cases: the contract's, and requests whose answers were recorded from a real
# kube-apiserver v1.37.2.
CONFORMANCE ?= ../shared/conformance/run.py
CONFORMANCE_CASES ?= $(addprefix $(dir $(CONFORMANCE)),cases.json upstream-v1.37.2.json)

# `make bench BENCH=validate` runs the benchmarks whose names contain `validate` (a criterion
# filter; for the load benchmark, an endpoint); `make bench QUICK=1` measures briefly.
# `make bench BENCH_ENFORCE=1` fails when the load benchmark misses a target, or when the
# library's instructions per review rise more than 3% above tests/benches/instructions.baseline;
# by default a miss is only printed, since on a shared machine noise alone can move a ratio
# past a target (instruction counts move with the compiler, not with noise).
BENCH ?=
QUICK ?=
BENCH_ENFORCE ?=
export BENCH_ENFORCE
CRITERION_ARGS := $(if $(QUICK),--warm-up-time 1 --measurement-time 2 --sample-size 10)

# The e2e suite's kube-apiserver, etcd, hollow kubelet and mock CSI driver, built from the Go
# modules under tests/e2e/tools (test tooling only) into the target directory, with Go's caches next to them; rebuilt only when the
# pinned versions change.
E2E_BIN := $(abspath $(TARGET_DIR))/e2e/bin

# The single-file installs, each an overlay rendered by `kubectl kustomize`; a manifest test
# fails when one is out of date.
INSTALL_OVERLAYS := cert-manager cert-manager-warn native native-warn

# The rollout test's load client, built from the Go module under tests/rollout (test tooling
# only, standard library only) into the target directory. `make rollout ROLLOUT_RATE=1000`
# sends fewer reviews per second, `ROLLOUT_ROLLS=3` restarts every replica three times.
ROLLOUT_BIN := $(abspath $(TARGET_DIR))/rollout/bin
ROLLOUT_RATE ?= 2000
ROLLOUT_ROLLS ?= 1

# The scale suite's size: SCALE_REPEATS is how many storms each install answers.
# `make scale SCALE_NODES=20 SCALE_STEADY=60 SCALE_REPEATS=1 SCALE_DOCS=` is the reduced run CI
# makes, which leaves docs/benchmarks.md as it is.
SCALE_NODES ?= 100
SCALE_CLAIMS ?= 50
SCALE_STEADY ?= 600
SCALE_REPEATS ?= 2
SCALE_DOCS ?= 1

.PHONY: run test packaged semver msrv tools lint fmt fmt-check build release bench conformance e2e scale chart install-manifests rollout image push clean

## run: the webhook server on localhost with a generated certificate (CA written to
## target/dev/ca.crt); later flags win, so ARGS can override any of these. The health port is
## 8081: kubectl without a kubeconfig talks to localhost:8080. Built with the `local` profile
## (no LTO, parallel code generation: a first build an operator can wait for)
run:
	$(CARGO) run --locked --profile local -p volume-health-webhooks --bin volume-health-webhook -- serve \
		--bind-address 127.0.0.1 --health-port 8081 --self-signed-ca-file $(DEV_CA) \
		--feature-gates CSIVolumeHealth=true $(ARGS)

## test: formatting, lints with warnings denied, every test including doc tests
## (benchmarks are built by lint and run by `make bench`). Without promtool (no apt-get to
## fetch it), the alerting-rule tests say so loudly and check nothing; REQUIRE_TOOLS=1 (CI)
## fails instead
test: fmt-check lint tools packaged semver
	PROMTOOL=$(PROMTOOL) $(if $(wildcard $(PROMTOOL)),,VOLUME_HEALTH_PROMTOOL_MISSING=1) \
		$(CARGO) test --workspace --locked

## msrv: every package of the workspace checked with the Rust its `rust-version` declares
## (installed by rustup, minimal profile; the library without and with its `kube` feature),
## so that the version a user reads is one the package builds with
msrv:
	@command -v rustup >/dev/null || { echo "error: make msrv installs toolchains with rustup, which is not on PATH" >&2; exit 1; }
	cargo metadata --no-deps --format-version 1 | python3 -c \
		'import json, sys; [print(p["rust_version"], p["name"]) for p in json.load(sys.stdin)["packages"]]' | \
	while read version package; do \
		rustup toolchain list | grep -q "^$$version-" || \
			rustup toolchain install $$version --profile minimal --no-self-update || exit 1; \
		echo "msrv: $$package with Rust $$version"; \
		K8S_OPENAPI_ENABLED_VERSION=1.37 cargo +$$version check --locked --quiet -p $$package \
			--target-dir $(TARGET_DIR)/msrv-$$version || exit 1; \
	done
	rustup toolchain list | grep -q "^1.89-" || rustup toolchain install 1.89 --profile minimal --no-self-update
	K8S_OPENAPI_ENABLED_VERSION=1.37 cargo +1.89 check --locked --quiet -p volume-health-validation \
		--features kube --target-dir $(TARGET_DIR)/msrv-1.89

## packaged: the published crates (volume-health-validation and its error-line) as `cargo
## package` makes them, verified on their own (the library picks no Kubernetes version, so the
## check builds with K8S_OPENAPI_ENABLED_VERSION), then tests/outside-writer, a program outside
## the workspace that depends on them by version, built against the packages
packaged:
	K8S_OPENAPI_ENABLED_VERSION=1.37 $(CARGO) package --locked --allow-dirty --target-dir target \
		-p volume-health-error-line -p volume-health-validation
	$(CARGO) build --locked --manifest-path tests/outside-writer/Cargo.toml \
		--target-dir $(TARGET_DIR)/outside-writer

## semver: the published packages (volume-health-validation with every feature, and its
## error-line) compared with the last release by cargo-semver-checks, so that a breaking change
## cannot land under an unchanged version (a 0.x minor or a major bump allows one). The last
## release is the commit that added the CHANGELOG's newest release heading. The tool is built
## once under the target directory
semver: $(SEMVER_CHECKS)
	baseline=$$(tests/release/semver-baseline.sh) && \
	K8S_OPENAPI_ENABLED_VERSION=1.37 $(SEMVER_CHECKS) semver-checks --baseline-rev $$baseline \
		-p volume-health-validation -p volume-health-error-line --all-features

$(SEMVER_CHECKS):
	$(CARGO) install --locked --quiet cargo-semver-checks --version $(SEMVER_CHECKS_VERSION) \
		--root $(abspath $(TOOLS))

## tools: what the tests run besides cargo and kubectl: promtool
tools: $(PROMTOOL)

$(abspath $(TOOLS))/usr/bin/promtool:
	@if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then \
		if [ -n "$(REQUIRE_TOOLS)" ]; then \
			echo "error: promtool is not on PATH and there is no apt-get to fetch it" >&2; exit 1; \
		fi; \
		echo "NOTICE: promtool is not on PATH and there is no apt-get to fetch it: the alerting-rule" >&2; \
		echo "NOTICE: tests will check nothing. Install Prometheus' promtool, or set PROMTOOL." >&2; \
	else \
		dir=$(abspath $(TOOLS)) && mkdir -p $$dir && cd $$dir && \
		{ apt-get download prometheus || { apt-get update -qq && apt-get download prometheus; }; } && \
		dpkg-deb -x $$dir/prometheus_*.deb $$dir && rm -f $$dir/prometheus_*.deb && \
		$@ --version; \
	fi

$(abspath $(TOOLS))/usr/bin/valgrind:
	mkdir -p $(TOOLS)
	cd $(TOOLS) && { apt-get download valgrind || { apt-get update -qq && apt-get download valgrind; }; }
	dpkg-deb -x $(TOOLS)/valgrind_*.deb $(TOOLS)
	rm -f $(TOOLS)/valgrind_*.deb
	VALGRIND_LIB=$(abspath $(TOOLS))/usr/libexec/valgrind $@ --version

## lint: clippy over every crate and target, warnings are errors
lint:
	$(CARGO) clippy --workspace --locked --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all --check

build:
	$(CARGO) build --workspace --locked

## release: the server and the node doctor, optimized
release:
	$(CARGO) build --release --locked -p volume-health-webhooks --bin volume-health-webhook \
		-p csi-globalmount --bin csi-globalmount-doctor

## conformance: what CI runs after `make test`: the apiserver conformance suite against the
## release binary
conformance: release
	python3 $(CONFORMANCE) --binary $(BIN) --cases $(CONFORMANCE_CASES)

## e2e: a real kube-apiserver v1.37.2 and etcd on loopback, no webhook installed: the admission
## fixtures, the differential requests and 2,000 seeded generated writes replayed as real writes
## (VOLUME_HEALTH_E2E_SEED=<seed> replays a run's), SubjectAccessReviews posted, each in-tree
## answer compared with the library's; the shipped webhooks end to end; the native
## policies alone, type-checked by kube-controller-manager; the v1.37.2 kubelet's own code
## (kubemark's hollow kubelet, mock CSI drivers) writing through the default install, every
## replica down and no repair, and its status manager's read of a pod pinned to the precision
## of one field (a Go test); the repair entries' matchConditions evaluated with the
## apiserver's own code, their cost linear in the report (a Go test); the repair's JSON Patch applied
## with the apiserver's own json-patch, its cost linear in the object; then every command of
## the README and docs that needs a cluster, the release binaries or helm, run as the docs give
## it (slow: ignored by `make test`)
e2e: release
	tests/e2e/tools/build.sh $(E2E_BIN)
	tests/e2e/tools/build-helm.sh $(E2E_BIN)
	GOCACHE=$(E2E_BIN)/../go-build GOMODCACHE=$(E2E_BIN)/../go-mod GOFLAGS="-mod=readonly -modcacherw" \
		go -C tests/e2e/tools/kube-apiserver test -count=1 -v ./statusprecision/ ./conditioncost/
	VOLUME_HEALTH_E2E_BIN=$(E2E_BIN) VOLUME_HEALTH_E2E_WEBHOOK=$(abspath $(BIN)) VOLUME_HEALTH_HELM=$(E2E_BIN)/helm \
		$(CARGO) test --locked -p volume-health-tests --test e2e --test e2e_shipped --test e2e_repair --test e2e_kubelet --test e2e_policies --test e2e_writer --test e2e_verify --test e2e_audit --test e2e_static_policies --test e2e_drivers --test patch_cost --test docs_commands -- --ignored --nocapture --test-threads=1

## scale: KEP-1432's beta scalability bar with the kubelet's own code: SCALE_NODES hollow
## kubelets (100) with SCALE_CLAIMS CSI claims and pods each (50), one mock driver process, the
## default install on kube-apiserver v1.37.2; the steady state (SCALE_STEADY seconds, three
## times), storms with and without the configuration, a tenth of the volumes repaired; the
## report is printed and, when every phase passed, written to docs/benchmarks.md (about two
## hours on 2 cores; as root it raises fs.inotify.max_user_instances for the kubelets and puts
## them in one CPU cgroup while it runs)
scale: release
	tests/e2e/tools/build.sh $(E2E_BIN)
	VOLUME_HEALTH_E2E_BIN=$(E2E_BIN) VOLUME_HEALTH_E2E_WEBHOOK=$(abspath $(BIN)) \
		VOLUME_HEALTH_SCALE_NODES=$(SCALE_NODES) VOLUME_HEALTH_SCALE_CLAIMS=$(SCALE_CLAIMS) \
		VOLUME_HEALTH_SCALE_STEADY_SECONDS=$(SCALE_STEADY) VOLUME_HEALTH_SCALE_REPEATS=$(SCALE_REPEATS) $(if $(SCALE_DOCS),VOLUME_HEALTH_E2E_WRITE_DOCS=1) \
		$(CARGO) test --locked -p volume-health-tests --test scale -- --ignored --nocapture

## chart: `helm lint` and `helm template` of charts/volume-health with the pinned helm, built
## with Go from tests/e2e/tools/helm; each render is compared with the kustomize install it
## mirrors (ignored by `make test`, which needs no Go)
chart:
	tests/e2e/tools/build-helm.sh $(E2E_BIN)
	VOLUME_HEALTH_HELM=$(E2E_BIN)/helm $(CARGO) test --locked -p volume-health-tests --test chart -- --ignored

## install-manifests: regenerate manifests/install/*.yaml from their overlays
install-manifests:
	mkdir -p manifests/install
	for overlay in $(INSTALL_OVERLAYS); do \
		{ printf '%s\n' "# Generated by \`make install-manifests\` from manifests/overlays/$$overlay" \
			"# (kubectl kustomize); do not edit."; \
		  kubectl kustomize manifests/overlays/$$overlay; } > manifests/install/$$overlay.yaml || exit 1; \
	done

## rollout: three replicas of the release binary with the Deployment's flags behind haproxy
## (installed when missing), restarted one by one under load from a Go net/http client, for
## HTTP/2 and HTTP/1.1, with the endpoint leaving at once and after failed probes: no review
## may fail; then a SIGKILL, which may lose only what was in flight (some 4 minutes; ignored by
## `make test`)
rollout: release
	tests/rollout/setup.sh $(ROLLOUT_BIN)
	VOLUME_HEALTH_ROLLOUT_BIN=$(ROLLOUT_BIN) VOLUME_HEALTH_WEBHOOK_BIN=$(abspath $(BIN)) \
		ROLLOUT_RATE=$(ROLLOUT_RATE) ROLLOUT_ROLLS=$(ROLLOUT_ROLLS) \
		$(CARGO) test --locked -p volume-health-tests --test rollout -- --ignored --nocapture

## bench: criterion micro-benchmarks (validation; handlers in-process), the end-to-end load
## benchmark (next to a plain and a strict JSON baseline, with its targets), the library's
## instructions per review under callgrind (next to a strict JSON pass and to the recorded
## counts, at most 3% above them, and next to the `local` profile's build, `make run`'s), `check` on a cluster dump and the doctor on a dense node,
## each next to a baseline; then the webhook hop through a real kube-apiserver (a write with
## and without the webhooks).
## BENCH=<filter>, QUICK=1, BENCH_ENFORCE=1: see above.
bench: $(VALGRIND)
	$(CARGO) bench --locked -p volume-health-validation --bench validate -- $(CRITERION_ARGS) $(BENCH)
	$(CARGO) bench --locked -p volume-health-tests --bench handlers -- $(CRITERION_ARGS) $(BENCH)
	$(CARGO) build --release --locked -p volume-health-webhooks --bin volume-health-webhook
	$(CARGO) bench --locked -p volume-health-tests --bench load -- $(if $(QUICK),--quick) $(BENCH)
	local=$$($(CARGO) bench --locked --profile local -p volume-health-tests --bench instructions \
		--no-run --message-format=json-render-diagnostics | python3 -c \
		'import json, sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])') && \
	VALGRIND=$(VALGRIND) $(if $(VALGRIND_LIB),VALGRIND_LIB=$(VALGRIND_LIB)) \
		VOLUME_HEALTH_INSTRUCTIONS_OTHER_BUILD=$$local \
		$(CARGO) bench --locked -p volume-health-tests --bench instructions -- $(BENCH)
	$(CARGO) bench --locked -p volume-health-check --bench dump
	$(CARGO) bench --locked -p csi-globalmount --bench dense_node
	tests/e2e/tools/build.sh $(E2E_BIN)
	VOLUME_HEALTH_E2E_BIN=$(E2E_BIN) VOLUME_HEALTH_E2E_WEBHOOK=$(abspath $(BIN)) \
		$(CARGO) bench --locked -p volume-health-tests --bench hop -- $(if $(QUICK),--quick)

## image: the server and doctor images, with docker or podman (CONTAINER=podman)
image:
	$(CONTAINER) build --target webhook -t $(IMAGE) .
	$(CONTAINER) build --target doctor -t $(DOCTOR_IMAGE) .

## push: push both images to REGISTRY
push: image
	$(CONTAINER) push $(IMAGE)
	$(CONTAINER) push $(DOCTOR_IMAGE)

clean:
	$(CARGO) clean
