#!/bin/sh
# Copy into the chart what it shares with the kustomize base, so both render from the same files:
#   policies/*.yaml                     -> trainguard/files/policies/   (the policies ConfigMap)
#   deploy/webhook-configurations.yaml  -> trainguard/files/            (the webhook configurations)
#   deploy/crds/*.yaml                  -> trainguard/crds/             (the PolicyException CRD)
#   deploy/rbac.yaml                    -> trainguard/files/rbac/rbac.yaml
#   deploy/rbac-policy-admin.yaml       -> trainguard/files/rbac/policy-admin.yaml
#   deploy/<component>/rbac*.yaml       -> trainguard/files/rbac/<component>.yaml  (self-register, audit)
#
# Helm reads no file outside the chart directory (.Files), so the chart holds copies.
# tests/deploy/test_chart.py fails while a copy differs from its source: run this script, then
# commit what it changed.
set -eu
LC_ALL=C
export LC_ALL

root=$(CDPATH= cd -- "$(dirname -- "$0")/../.." && pwd)
chart="$root/deploy/helm/trainguard"

sync_dir() {  # sync_dir SRC DST: DST/*.yaml becomes exactly SRC/*.yaml
  mkdir -p "$2"
  for f in "$2"/*.yaml; do
    [ -e "$f" ] && rm -f -- "$f"
  done
  for f in "$1"/*.yaml; do
    [ -e "$f" ] && cp -- "$f" "$2/"
  done
  return 0
}

sync_dir "$root/policies" "$chart/files/policies"
sync_dir "$root/deploy/crds" "$chart/crds"
cp -- "$root/deploy/webhook-configurations.yaml" "$chart/files/webhook-configurations.yaml"

mkdir -p "$chart/files/rbac"
rm -f -- "$chart/files/rbac/"*.yaml
cp -- "$root/deploy/rbac.yaml" "$chart/files/rbac/rbac.yaml"
cp -- "$root/deploy/rbac-policy-admin.yaml" "$chart/files/rbac/policy-admin.yaml"
for component in self-register audit; do
  for f in "$root/deploy/$component"/rbac*.yaml; do
    [ -e "$f" ] && cp -- "$f" "$chart/files/rbac/$component.yaml"
  done
done
exit 0
