#!/usr/bin/env bash
# The Memcached tutorial end to end, as a newcomer would run it: scaffold the operator with rustbuilder,
# build it, start a local cluster (no Docker), run the operator, apply a Memcached of size 3 and show what
# it made. Everything is removed on exit or Ctrl-C.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
rustbuilder=${RUSTBUILDER:-$root/target/debug/rustbuilder}
work=$(mktemp -d -t rustbuilder-demo-XXXXXX)
manager_pid=""
cluster_pid=""

# Stops the operator first, then the cluster (which removes its processes and files), then the rest.
cleanup() {
  echo "==> cleaning up"
  for pid in $manager_pid $cluster_pid; do
    kill -INT "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n\033[1;32m==> %s\033[0m\n' "$*"; }

export PATH="$(dirname "$rustbuilder"):$PATH"

step "Scaffolding the tutorial operator in $work/memcached-operator"
mkdir "$work/memcached-operator" && cd "$work/memcached-operator"
rustbuilder init --domain example.com
rustbuilder create api --group cache --version v1alpha1 --kind Memcached \
  --image memcached:1.6.26-alpine3.19 \
  --image-container-command memcached,--memory-limit=64,-o,modern,-v \
  --image-container-port 11211 --run-as-user 1001 \
  --plugins deploy-image/v1-alpha

step "Generating manifests and building (the project needs only cargo from here on)"
make manifests
cargo build --bin memcached-operator --example envtest

step "Control-plane binaries (downloaded the first time; kwok built with Go)"
export KUBEBUILDER_ASSETS=$(cargo run --quiet --example envtest -- assets --cluster)
export PATH="$KUBEBUILDER_ASSETS:$PATH"

step "Starting a local cluster (etcd, kube-apiserver, controller-manager, scheduler, kwok fake nodes)"
cargo run --quiet --example envtest -- local-cluster "$work/kubeconfig" > "$work/cluster.log" 2>&1 &
cluster_pid=$!
until [ -f "$work/kubeconfig" ]; do
  kill -0 "$cluster_pid" 2>/dev/null || { cat "$work/cluster.log"; exit 1; }
  sleep 1
done
export KUBECONFIG=$work/kubeconfig

step "Installing the CRD and running the operator"
make install
probes=127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cargo run --quiet --bin memcached-operator -- --health-probe-bind-address="$probes" > "$work/manager.log" 2>&1 &
manager_pid=$!
# Ready once its caches are synced: a Memcached applied now is reconciled at once.
until python3 -c "import urllib.request, sys; urllib.request.urlopen('http://$probes/readyz', timeout=1)" 2>/dev/null; do
  kill -0 "$manager_pid" 2>/dev/null || { cat "$work/manager.log"; exit 1; }
  sleep 0.5
done

step "Applying a Memcached of size 3"
kubectl apply -f - <<YAML
apiVersion: cache.example.com/v1alpha1
kind: Memcached
metadata:
  name: my-memcached
  namespace: default
spec:
  size: 3
YAML
kubectl wait --for=condition=Available memcached/my-memcached --timeout=300s

step "kubectl get memcached,deployments,pods"
kubectl get memcached,deployments,pods

step "Done: the operator made a Deployment of 3 ready memcached pods"
