# The `baton` image: one binary, run as a non-root user, that works with a
# read-only root filesystem (it writes nothing outside /tmp).
#
#   docker build -t baton:0.1.0 .
#   docker run --rm baton:0.1.0 --help
#
# Exec agents that need more than a POSIX shell add a layer on top:
# deploy/docker/exec-python.Dockerfile is the example.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p baton-cli --bin baton \
    && install -m 0755 target/release/baton /usr/local/bin/baton

FROM debian:bookworm-slim
RUN groupadd --system --gid 10001 baton \
    && useradd --system --uid 10001 --gid baton --no-create-home --shell /usr/sbin/nologin baton
COPY --from=build /usr/local/bin/baton /usr/local/bin/baton
USER 10001:10001
# Metrics and probes, when --metrics-addr / BATON_METRICS_ADDR is 0.0.0.0:9464.
EXPOSE 9464
ENTRYPOINT ["baton"]
CMD ["--help"]
