# syntax=docker/dockerfile:1
# Build: a locked release build on a Rust image at least as new as the crate's rust-version.
FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY migrations ./migrations
COPY examples ./examples
COPY benches ./benches
RUN cargo build --release --locked --bin package-executor \
 && strip target/release/package-executor

# Run: a small, non-root runtime image; the binary is the entrypoint.
FROM gcr.io/distroless/cc-debian12:nonroot
# glibc keeps up to 128 freed small blocks per size in each thread's cache instead of 7: a run
# allocates and frees many small strings and values per revision, and this took about a tenth
# of the executor's CPU off a cold run for about 3 MiB of memory (README, Benchmarks).
ENV GLIBC_TUNABLES=glibc.malloc.tcache_count=128
COPY --from=build /src/target/release/package-executor /usr/local/bin/package-executor
COPY examples/demo-fixture.json /usr/share/package-executor/demo-fixture.json
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/package-executor"]
CMD ["run"]
