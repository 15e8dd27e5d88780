# syntax=docker/dockerfile:1
# The base images are build arguments with the public defaults, so a build can substitute them
# (a mirror, or bases made from Debian packages where no registry is reachable):
#   docker build --build-arg RUST_IMAGE=… --build-arg RUNTIME_IMAGE=… .
# RUST_IMAGE must be at least Cargo.toml's rust-version (tests/it/msrv.rs holds the default to it).
ARG RUST_IMAGE=rust:1.94-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

# Build: a locked release build.
FROM ${RUST_IMAGE} AS build
WORKDIR /src
# Dependencies first, in a layer of their own: built against stub sources (a stub library for
# each workspace crate under crates/, and an empty file for each bench and test target the
# manifest names, which cargo wants to exist), so a change to the sources rebuilds only the
# workspace's own crates. The test targets' stubs stay: the tests are not part of the image.
COPY Cargo.toml Cargo.lock ./
COPY crates/core/Cargo.toml crates/core/
COPY crates/store/Cargo.toml crates/store/
COPY crates/testkit/Cargo.toml crates/testkit/
RUN mkdir -p src benches \
 && printf '//! Stub: the dependency layer.\nfn main() {}\n' > src/main.rs \
 && echo '//! Stub: the dependency layer.' > src/lib.rs \
 && for c in crates/*/; do mkdir -p "${c}src" && echo '//! Stub: the dependency layer.' > "${c}src/lib.rs"; done \
 && for b in $(sed -n '/^\[\[bench\]\]/{n;s/^name = "\(.*\)"$/\1/p;}' Cargo.toml); do touch "benches/$b.rs"; done \
 && for t in $(sed -n 's/^path = "\(tests\/.*\)"$/\1/p' Cargo.toml); do mkdir -p "$(dirname "$t")" && touch "$t"; done \
 && cargo build --release --locked --bin package-executor \
 && rm -rf src benches crates/*/src
COPY crates ./crates
COPY src ./src
COPY examples ./examples
COPY benches ./benches
# Cargo features of the build: none for a release. (The end-to-end tier builds a second image with
# `next-schema`, one migration ahead, to upgrade to.) Declared here, after the dependency layer,
# so that it never invalidates that layer.
ARG CARGO_FEATURES=""
# The stubs' build left newer timestamps on the crate's own outputs: make sure it is rebuilt.
RUN touch src/main.rs src/lib.rs crates/*/src/lib.rs \
 && cargo build --release --locked --bin package-executor ${CARGO_FEATURES:+--features "$CARGO_FEATURES"} \
 && strip target/release/package-executor

# Run: a small, non-root runtime image; the binary is the entrypoint.
FROM ${RUNTIME_IMAGE}
# glibc keeps up to 128 freed small blocks per size in each thread's cache instead of 7: a run
# allocates and frees many small strings and values per revision, and this took about a tenth
# of the executor's CPU off a cold run for about 3 MiB of memory (docs/benchmarks.md).
ENV GLIBC_TUNABLES=glibc.malloc.tcache_count=128
COPY --from=build /src/target/release/package-executor /usr/local/bin/package-executor
COPY examples/demo-fixture.json /usr/share/package-executor/demo-fixture.json
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/package-executor"]
CMD ["run"]
