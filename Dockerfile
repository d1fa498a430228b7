# syntax=docker/dockerfile:1
# Multi-stage build of tpujob-operator. The same image runs the controller (`run`, the default
# command) and the pre-flight checker (`preflight`) in the workers' init containers, whose
# command is `tpujob-operator preflight` (on the PATH here).
#
#   docker build -t tpujob-operator:0.1.0 .
#   docker build --build-arg DEBIAN_IMAGE=debian:bookworm-YYYYMMDD-slim --build-arg JOBS=8 .
#
# Build arguments:
#   DEBIAN_IMAGE  base of both stages; a dated bookworm-slim tag, so a rebuild gets the same
#                 distribution and the runtime package names below stay valid
#   JOBS          parallel compile jobs (default: every core of the build machine)
#
# scripts/check-image-deps.sh (a unit test) checks the final stage's package list against the
# libraries the built binary links.
ARG DEBIAN_IMAGE=debian:bookworm-20251117-slim

FROM ${DEBIAN_IMAGE} AS build
ARG JOBS=
WORKDIR /src
# The same step `make` runs on a fresh machine, limited to what compiling the binary needs:
# no GoogleTest, no Prometheus.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN TPUJOB_DEPS=build bash scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY CMakeLists.txt ./
COPY operator operator
COPY src src
COPY supervisor supervisor
# The build type the tests are built with (RelWithDebInfo: -O2 -g); strip drops the debug info.
# TPUJOB_BUILD_TESTS=OFF: the operator alone, without the tests and the benchmark tool.
# The build directory sits where a clone's build/ does, so that a ccache shared with a host
# build of the same sources (scripts/build-image.sh mounts it) finds the same relative paths.
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPUJOB_BUILD_TESTS=OFF \
 && cmake --build build --target tpujob-operator tpujob-supervise -j "${JOBS:-$(nproc)}" \
 && strip build/tpujob-operator build/tpujob-supervise \
 && build/tpujob-operator --version && build/tpujob-supervise --version

FROM ${DEBIAN_IMAGE}
# Runtime libraries only, one package per library the binary links (ldd): cpprestsdk, yaml-cpp,
# spdlog, fmt, prometheus-cpp (core), simdjson, RE2, OpenSSL (libssl/libcrypto), brotli and zlib
# (through cpprestsdk), the C++ runtime. libc6 and libgcc-s1 are part of every Debian image.
# ca-certificates: the system CA bundle, used when a kubeconfig names no CA of its own.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libcpprest2.10 libyaml-cpp0.7 libspdlog1.10 libfmt9 libprometheus-cpp-core1.0 libsimdjson14 \
      libre2-9 libssl3 libbrotli1 zlib1g libstdc++6 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/tpujob-operator /usr/local/bin/tpujob-operator
# The same binary is the `kubectl tpujob` plugin under this name.
RUN ln -s tpujob-operator /usr/local/bin/kubectl-tpujob
# The in-place restart supervisor (static: an init container copies it into the workers'
# containers, whatever their image).
COPY --from=build /src/build/tpujob-supervise /usr/local/bin/tpujob-supervise
# Numeric, so that the kubelet can enforce runAsNonRoot without an /etc/passwd entry; the
# pre-flight init container sets the same user explicitly.
USER 65532:65532
# /metrics, then /healthz and /readyz (the defaults of --metrics-address and --health-address).
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/tpujob-operator"]
CMD ["run"]
