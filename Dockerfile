# Images of the webhook server and the node doctor; `make image` builds both, with docker or
# podman (CONTAINER=podman), named after REGISTRY and TAG:
#   docker build --target webhook -t ghcr.io/volume-health/volume-health-webhook:v0.3.0 .
#   docker build --target doctor -t ghcr.io/volume-health/csi-globalmount-doctor:v0.3.0 .
# Base images are fully qualified: podman refuses short names without a search registry.

FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src

# Dependencies first, in a layer of their own: the manifests and the lock file with empty
# sources, so that a change to the sources rebuilds only the workspace's own crates.
COPY Cargo.toml Cargo.lock ./
COPY error-line/Cargo.toml error-line/
COPY validation/Cargo.toml validation/
COPY authz/Cargo.toml authz/
COPY webhooks/Cargo.toml webhooks/
COPY globalmount/Cargo.toml globalmount/
COPY check/Cargo.toml check/
COPY policies/Cargo.toml policies/
COPY cluster/Cargo.toml cluster/
COPY tests/Cargo.toml tests/
COPY test-kit/Cargo.toml test-kit/
COPY examples/health-monitor/Cargo.toml examples/health-monitor/
# Every target a manifest declares needs a file (tests/tests/dockerfile.rs checks this list).
RUN for file in error-line/src/lib.rs validation/src/lib.rs authz/src/lib.rs webhooks/src/lib.rs globalmount/src/lib.rs \
        check/src/lib.rs policies/src/lib.rs cluster/src/lib.rs tests/src/lib.rs test-kit/src/lib.rs validation/benches/validate.rs \
        tests/benches/load.rs tests/benches/handlers.rs tests/benches/hop.rs tests/benches/instructions.rs \
        tests/src/bin/baseline-webhook.rs check/benches/dump.rs \
        webhooks/src/main.rs globalmount/src/bin/csi-globalmount-doctor.rs \
        globalmount/benches/dense_node.rs globalmount/tests/behaviours/main.rs \
        examples/health-monitor/src/lib.rs; do \
      mkdir -p "$(dirname "$file")" && echo 'fn main() {}' > "$file"; \
    done \
 && cargo build --release --locked -p volume-health-webhooks -p csi-globalmount

# Then the sources. Their files may be older than the stubs just built, so touch them for
# cargo to see the change.
COPY . .
RUN find error-line validation authz webhooks globalmount check policies cluster tests test-kit -name '*.rs' -exec touch {} + \
 && cargo build --release --locked -p volume-health-webhooks -p csi-globalmount \
 && mkdir /out \
 && cp target/release/volume-health-webhook target/release/csi-globalmount-doctor /out/

# The doctor reads kubelet's 0750 root directories, so it runs as root (with every capability
# dropped by its Job); the image itself does not fix the user.
FROM gcr.io/distroless/cc-debian12 AS doctor
COPY --from=build /out/csi-globalmount-doctor /usr/local/bin/csi-globalmount-doctor
ENTRYPOINT ["/usr/local/bin/csi-globalmount-doctor"]

# Last, so that a plain `docker build` makes the server image. Distroless nonroot: UID 65532,
# no shell, nothing to write; the Deployment runs with a read-only root filesystem.
FROM gcr.io/distroless/cc-debian12:nonroot AS webhook
COPY --from=build /out/volume-health-webhook /usr/local/bin/volume-health-webhook
USER 65532:65532
EXPOSE 8443 8080
ENTRYPOINT ["/usr/local/bin/volume-health-webhook"]
CMD ["serve"]
