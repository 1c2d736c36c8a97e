#!/usr/bin/env bash
# Checks deploy/ offline (only PyPI and Debian's packages are reached, to install the tools):
# - every manifest in deploy/kubernetes/ against the Kubernetes API schemas (strict: an unknown
#   or misplaced field fails), for each pinned Kubernetes version;
# - kustomization.yaml lists exactly those manifests (and renders, when kubectl is installed);
# - compose.yaml, nginx.conf, the Dockerfile and .dockerignore keep what deploy/README.md
#   promises (scripts/validate-deploy.py), and hadolint finds nothing in the Dockerfile.
# The tools live in a venv under target/ (pinned in scripts/deploy-requirements.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

# The oldest Kubernetes the manifests support, and a current one.
K8S_VERSIONS=(1.30.0 1.35.0)

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=
apt_install() {
  [ -n "$apt_updated" ] || { as_root apt-get update -qq; apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

venv=target/deploy-venv
requirements=scripts/deploy-requirements.txt
if ! cmp -s "$requirements" "$venv/requirements.txt" 2>/dev/null; then
  echo "== installing the deploy checkers (pinned in $requirements)"
  command -v python3 >/dev/null 2>&1 || apt_install python3
  rm -rf "$venv"
  # Debian ships venv's pip bootstrap apart, in python3-venv.
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    echo "== installing python3-venv"
    apt_install python3-venv
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install -q --disable-pip-version-check --no-input -r "$requirements"
  cp "$requirements" "$venv/requirements.txt"
fi

mapfile -t manifests < <(find deploy/kubernetes -maxdepth 1 -name '*.yaml' ! -name kustomization.yaml | sort)
[ "${#manifests[@]}" -gt 0 ] || { echo "no manifests in deploy/kubernetes" >&2; exit 1; }
for version in "${K8S_VERSIONS[@]}"; do
  echo "== Kubernetes $version (strict): ${#manifests[@]} manifests"
  "$venv/bin/kubernetes-validate" --strict --quiet -k "$version" "${manifests[@]}"
done

if command -v kubectl >/dev/null 2>&1; then
  echo "== kustomize build"
  kubectl kustomize deploy/kubernetes >/dev/null
fi

echo "== hadolint deploy/Dockerfile"
"$venv/bin/hadolint" deploy/Dockerfile

echo "== compose, nginx, Dockerfile, .dockerignore, kustomization"
"$venv/bin/python" scripts/validate-deploy.py

# Only where Docker runs (not in CI here): Compose's own reading of the file.
if docker compose version >/dev/null 2>&1; then
  echo "== docker compose config"
  docker compose -f deploy/compose.yaml config -q
fi
echo "== deploy: ok"
