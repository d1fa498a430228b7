# syntax=docker/dockerfile:1
# Multi-stage build of tpujob-operator. The same image runs the controller (`run`) and the
# pre-flight checker (`preflight`) in the workers' init containers.
# The build stage reuses scripts/install-deps.sh, the same step `make` runs on a fresh machine.
ARG DEBIAN_IMAGE=debian:bookworm-20251117-slim

FROM ${DEBIAN_IMAGE} AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY CMakeLists.txt ./
COPY operator operator
COPY src src
COPY tests tests
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
 && cmake --build /build --target tpujob-operator -j "$(nproc)" \
 && strip /build/tpujob-operator

FROM ${DEBIAN_IMAGE}
# Runtime libraries only: cpprestsdk (and the Boost, OpenSSL and zlib it links), yaml-cpp,
# spdlog/fmt.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libcpprest2.10 libyaml-cpp0.7 libspdlog1.10 libfmt9 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /build/tpujob-operator /usr/local/bin/tpujob-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/tpujob-operator"]
CMD ["run"]
