# The multiarch image: one binary, every role (see README). Build for each architecture
# of your cluster, e.g. docker buildx build --platform linux/amd64,linux/arm64 .
# The node image with only the exec-format-error daemon:
#   docker buildx build --build-arg FEATURES=enoexec-daemon -t multiarch-node .
# (Not built by CI: no container engine runs on the development machines.)
FROM docker.io/library/rust:1.95-bookworm AS build
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends clang libbpf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The enoexec-daemon role needs the eBPF program: fail the build rather than ship without it.
ENV MULTIARCH_EBPF_REQUIRED=1
ARG FEATURES=default
# Stripped of the release profile's line tables (four fifths of the binary); symbols stay,
# so a backtrace still names its functions.
RUN if [ "$FEATURES" = default ]; then \
        cargo build --release --locked --bin multiarch; \
    else \
        cargo build --release --locked --bin multiarch --no-default-features --features "$FEATURES"; \
    fi \
    && strip --strip-debug target/release/multiarch

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/multiarch /usr/local/bin/multiarch
# Non-root by default; the enoexec-daemon DaemonSet sets runAsUser 0 with BPF capabilities.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/multiarch"]
