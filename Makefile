# The project's entry points; CI runs `.ci/run`, which calls these targets.

CARGO ?= cargo
BIN := target/release/volume-health-webhook
DEV_CA := target/dev/ca.crt

.PHONY: run test lint fmt fmt-check build release bench conformance clean

## run: the webhook server on localhost with a generated certificate (CA written to target/dev/ca.crt)
run:
	$(CARGO) run --release -p volume-health-webhooks --bin volume-health-webhook -- serve \
		--bind-address 127.0.0.1 --self-signed-ca-file $(DEV_CA) \
		--feature-gates CSIVolumeHealth=true $(ARGS)

## test: formatting, lints with warnings denied, every test including doc tests
## (benchmarks are built by lint and run by `make bench`)
test: fmt-check lint
	$(CARGO) test --workspace --locked

## lint: clippy over every crate and target, warnings are errors
lint:
	$(CARGO) clippy --workspace --locked --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all --check

build:
	$(CARGO) build --workspace --locked

release:
	$(CARGO) build --release --locked -p volume-health-webhooks --bin volume-health-webhook

## bench: criterion micro-benchmarks (validation; handlers in-process), the end-to-end load
## benchmark and `check` on a cluster dump, each next to a baseline
bench:
	$(CARGO) bench --locked -p volume-health-validation --bench validate
	$(CARGO) bench --locked -p volume-health-tests --bench handlers
	$(CARGO) build --release --locked -p volume-health-webhooks --bin volume-health-webhook
	$(CARGO) bench --locked -p volume-health-tests --bench load
	$(CARGO) bench --locked -p volume-health-check --bench dump

clean:
	$(CARGO) clean
