# syntax=docker/dockerfile:1
#
# The fulfiller image: one binary for the controller (`fulfiller controller`, the chart's
# Deployment) and the runner (`fulfiller run`, each runner Job), built from cmd/fulfiller,
# which links no test machinery (the development binary cmd/fulfiller-dev, with the local
# environment and the simulated machine, is not in the image), OpenTofu and the providers of
# the shipped modules built from source at the versions the project pins (hack/tools.sh, as
# for the tests), the shipped node-type modules in /modules and a provider mirror in
# /opt/tofu/providers with a CLI configuration that installs providers from it only.
#
#   make image                     # docker build --build-arg VERSION=... -t fulfiller:dev .
#
# Needs BuildKit (cache mounts) and network access to the Go module proxy and the Debian
# archive (and to the registries of providers that modules beyond the shipped ones require). It is not built in the
# project's own test environment, which has no container engine.

ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
# The go command fetches the pinned toolchain (go.mod needs it; karpenter v1.15.0 does too).
ENV GOTOOLCHAIN=go1.26.9 GOWORK=off CGO_ENABLED=0
WORKDIR /src

# OpenTofu and the providers the shipped modules require, from source, with the script the
# tests use: the same pinned versions everywhere. The providers are laid out as a
# filesystem mirror (symbolic links resolved).
COPY hack/tools.sh hack/tools.sh
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    FULFILLER_CACHE=/tmp/fulfiller TOOLS="tofu provider-hcloud provider-kubectl" hack/tools.sh \
    && mkdir -p /out \
    && install -m 0755 "$(readlink -f /tmp/fulfiller/tools/bin/tofu)" /out/tofu \
    && cp -rL /tmp/fulfiller/tools/providers /out/providers \
    && rm -rf /tmp/fulfiller

COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/fulfiller ./cmd/fulfiller

FROM ${BASE_IMAGE}
# ca-certificates: provider and cloud APIs; git and ssh: module sources from git.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates git openssh-client \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 65532 fulfiller \
    && useradd --uid 65532 --gid 65532 --home-dir /home/fulfiller --create-home --shell /usr/sbin/nologin fulfiller

COPY --from=build /out/fulfiller /out/tofu /usr/local/bin/
COPY modules /modules
COPY hack/image/tofurc /etc/fulfiller/tofurc
COPY hack/image/mirror-providers.sh /usr/local/bin/fulfiller-mirror-providers

# Every provider the shipped modules require, for this image's platform, read-only at run
# time: the ones built above, and any other a module needs, downloaded.
COPY --from=build /out/providers /opt/tofu/providers
RUN fulfiller-mirror-providers /modules /opt/tofu/providers

# tofu reads its CLI configuration from TF_CLI_CONFIG_FILE. The runner gives tofu an
# environment of its own and passes on its FULFILLER_TOFU_ENV_* variables without the
# prefix, so the second variable is what reaches tofu in a run.
ENV TF_CLI_CONFIG_FILE=/etc/fulfiller/tofurc \
    FULFILLER_TOFU_ENV_TF_CLI_CONFIG_FILE=/etc/fulfiller/tofurc \
    CHECKPOINT_DISABLE=1

USER 65532:65532
WORKDIR /home/fulfiller
ENTRYPOINT ["/usr/local/bin/fulfiller"]
CMD ["controller"]
