#!/usr/bin/env bash
# Runs once when the dev container is created: the components `make lint` uses, and the test control
# plane (etcd, kube-apiserver, kubectl; Go, from the container's feature, builds them when nothing can
# be downloaded).
set -euo pipefail

rustup component add rustfmt clippy
make setup-envtest
