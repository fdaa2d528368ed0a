# Images of the webhook server and the node doctor.
#   docker build -t ghcr.io/volume-health/volume-health-webhook:v0.1.0 .
#   docker build --target doctor -t ghcr.io/volume-health/csi-globalmount-doctor:v0.1.0 .

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p volume-health-webhooks -p csi-globalmount \
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
