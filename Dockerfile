# The multiarch image: one binary, every role (see README). Build for each architecture
# of your cluster, e.g. docker buildx build --platform linux/amd64,linux/arm64 .
# (Not built by CI: no container engine runs on the development machines.)
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin multiarch

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/multiarch /usr/local/bin/multiarch
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/multiarch"]
