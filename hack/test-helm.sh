#!/usr/bin/env bash
# The Helm chart of a golden project (dist/chart, written by `rustbuilder edit --plugins helm/v2-alpha`):
# `helm lint`, `helm template` with its defaults and with every switch flipped, then `helm install` on a
# local cluster (etcd, kube-apiserver, controller-manager, scheduler and kwok fake nodes). The manager's
# Deployment must become Available: its pod lands on a fake node, which reports it running and ready
# without pulling the image.
#
#   HELM=<helm> KUBEBUILDER_ASSETS=<dir> hack/test-helm.sh testdata/project   (make test-helm)
set -euo pipefail

project=$(cd "${1:?usage: hack/test-helm.sh <project dir>}" && pwd)
chart=$project/dist/chart
helm=${HELM:?set HELM to a helm binary (make helm builds one)}
assets=${KUBEBUILDER_ASSETS:?set KUBEBUILDER_ASSETS to the control-plane binaries (make envtest)}
kubectl=$assets/kubectl
name=$(sed -n 's/^projectName: //p' "$project/PROJECT")
namespace=$name-system
[ -x "$helm" ] || { echo "no helm at $helm: run 'make helm'" >&2; exit 1; }
[ -x "$kubectl" ] || { echo "no kubectl in $assets: run 'make envtest'" >&2; exit 1; }
[ -f "$chart/Chart.yaml" ] || { echo "no chart in $chart: run 'rustbuilder edit --plugins helm/v2-alpha' there" >&2; exit 1; }

work=$(mktemp -d -t rustbuilder-helm-XXXXXX)
cluster_pid=""
cleanup() {
  if [ -n "$cluster_pid" ]; then
    kill -INT "$cluster_pid" 2>/dev/null || true
    wait "$cluster_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
step() { printf '==> %s\n' "$*"; }
start=$SECONDS

step "helm lint --strict"
"$helm" lint --strict "$chart"

step "helm template: the defaults"
"$helm" template "$name" "$chart" --namespace "$namespace" > "$work/default.yaml"
expect() { # FILE PATTERN: the rendered chart must hold the line
  grep -qxF -- "$2" "$1" || { echo "the rendered chart ($1) has no line '$2'" >&2; exit 1; }
}
refuse() {
  if grep -qxF -- "$2" "$1"; then echo "the rendered chart ($1) has the line '$2'" >&2; exit 1; fi
}
expect "$work/default.yaml" "kind: CustomResourceDefinition"
expect "$work/default.yaml" "  namespace: $namespace"
expect "$work/default.yaml" "        - --leader-elect"
expect "$work/default.yaml" "        - --metrics-bind-address=:8443"
expect "$work/default.yaml" "  name: $name-controller-manager-metrics-service"
# Every object carries the release's labels (templates/_helpers.tpl).
expect "$work/default.yaml" "    helm.sh/chart: $name-0.1.0"
expect "$work/default.yaml" "    app.kubernetes.io/instance: \"$name\""
expect "$work/default.yaml" "      app.kubernetes.io/name: $name"
refuse "$work/default.yaml" "kind: ServiceMonitor"
refuse "$work/default.yaml" "kind: NetworkPolicy"

step "helm template: every switch flipped"
"$helm" template "$name" "$chart" --namespace "$namespace" \
  --set crd.enable=false,rbac.enable=false,rbac.helpers=true,leaderElection.enable=false \
  --set metrics.port=9443,prometheus.enable=true,networkPolicy.enable=true,manager.replicas=2 \
  --set manager.image.repository=example.com/op,manager.image.tag=v1,manager.args={--zap-devel} > "$work/flipped.yaml"
refuse "$work/flipped.yaml" "kind: CustomResourceDefinition"
refuse "$work/flipped.yaml" "        - --leader-elect"
expect "$work/flipped.yaml" "kind: ServiceMonitor"
expect "$work/flipped.yaml" "kind: NetworkPolicy"
expect "$work/flipped.yaml" "        - --metrics-bind-address=:9443"
expect "$work/flipped.yaml" '        - "--zap-devel"'
expect "$work/flipped.yaml" '        image: "example.com/op:v1"'
expect "$work/flipped.yaml" "  replicas: 2"

step "a local cluster"
# Started outside the project, so that it does not install the project's CRDs itself: the chart does.
(cd "$project" && cargo build --quiet --example envtest)
envtest=${CARGO_TARGET_DIR:-$project/target}/debug/examples/envtest
(cd "$work" && exec "$envtest" local-cluster "$work/kubeconfig") > "$work/cluster.log" 2>&1 &
cluster_pid=$!
until [ -f "$work/kubeconfig" ]; do
  kill -0 "$cluster_pid" 2>/dev/null || { cat "$work/cluster.log"; exit 1; }
  sleep 1
done
export KUBECONFIG=$work/kubeconfig
ready=$SECONDS

step "helm install"
"$helm" install "$name" "$chart" --namespace "$namespace" --create-namespace --wait --timeout 3m
"$kubectl" --namespace "$namespace" wait --for=condition=Available "deployment/$name-controller-manager" --timeout=60s
"$kubectl" get crd -o name | grep -q . || { echo "the chart installed no CRD" >&2; exit 1; }
"$kubectl" --namespace "$namespace" get deployment,serviceaccount,service,role,rolebinding

step "helm uninstall keeps the CRDs"
"$helm" uninstall "$name" --namespace "$namespace" --wait
"$kubectl" get crd -o name | grep -q . || { echo "helm uninstall removed the CRDs (crd.keep is on)" >&2; exit 1; }

echo "helm chart of $name: ok (cluster up in $((ready - start))s, $((SECONDS - start))s in all)"
