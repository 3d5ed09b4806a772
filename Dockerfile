# The multiarch image: one binary, every role (see README). Build for each architecture
# of your cluster, e.g. docker buildx build --platform linux/amd64,linux/arm64 .
# (Not built by CI: no container engine runs on the development machines.)
FROM docker.io/library/rust:1.95-bookworm AS build
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends clang libbpf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The enoexec-daemon role needs the eBPF program: fail the build rather than ship without it.
ENV MULTIARCH_EBPF_REQUIRED=1
RUN cargo build --release --locked --bin multiarch

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/multiarch /usr/local/bin/multiarch
# Non-root by default; the enoexec-daemon DaemonSet sets runAsUser 0 with BPF capabilities.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/multiarch"]
