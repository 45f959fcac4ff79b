# kubecast's container image: the binary and the shared libraries it links, the CA bundle and
# a passwd entry, nothing else (no shell, no package manager); it runs as UID 65532.
#
#   docker build -t kubecast:0.1.0 .     # from source, in the Rust image (stage build-source)
#   scripts/image build                  # the same image from a binary built on this machine,
#                                        # with buildah and no registry (stage build-prebuilt)
#
# Both run scripts/image-rootfs; the runtime stage is the tree it gathers, on `scratch`.

# Where kubecast is compiled from source. Debian bookworm, like the libraries it then links.
ARG RUST_IMAGE=docker.io/library/rust:1.89-bookworm
# `source`: compile here; `prebuilt`: take target/image, which scripts/image made.
ARG FROM=source

FROM ${RUST_IMAGE} AS build-source
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential pkg-config libssl-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --locked --release --bin kubecast \
    && scripts/image-rootfs target/release/kubecast /image

FROM scratch AS build-prebuilt
COPY target/image/ /image/

FROM build-${FROM} AS build

FROM scratch
COPY --from=build /image/rootfs/ /
# The state directory (deploy/ mounts a volume there), writable by kubecast only.
COPY --from=build --chown=65532:65532 /image/state/ /var/lib/kubecast/
LABEL org.opencontainers.image.title="kubecast" \
      org.opencontainers.image.description="Watches Kubernetes Pods and publishes every change as a CloudEvent to Kafka and MQTT" \
      org.opencontainers.image.licenses="Apache-2.0"
# Non-root; the Deployment in deploy/ also sets runAsNonRoot and a read-only root filesystem.
USER 65532:65532
# /metrics, /healthz, /readyz with `metrics: {address: "0.0.0.0:9464"}`.
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/kubecast"]
CMD ["run", "--config", "/etc/kubecast/kubecast.yaml"]
