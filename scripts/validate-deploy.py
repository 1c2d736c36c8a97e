"""What deploy/ must keep, beyond schema validity (run by scripts/validate-deploy.sh).

Each check names the file and what a user would lose without it.
"""

import json
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
failures = []


def check(ok, where, what):
    if not ok:
        failures.append(f"{where}: {what}")


def env_list(service):
    """A compose service's environment as {name: value or None (passed through)}."""
    env = service.get("environment") or {}
    if isinstance(env, dict):
        return env
    out = {}
    for item in env:
        name, sep, value = item.partition("=")
        out[name] = value if sep else None
    return out


# The paths the probes and health checks use must be served (the spec is generated from the
# routes, and CI checks it has not drifted).
spec_paths = json.loads((ROOT / "openapi/openapi.json").read_text())["paths"]
for path in ("/healthz", "/readyz"):
    check(path in spec_paths, "openapi/openapi.json", f"the server does not serve {path}")

# --- compose.yaml ---------------------------------------------------------------------------
where = "deploy/compose.yaml"
compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
services = compose.get("services", {})
redis = services.get("redis", {})
dsh = services.get("dsh", {})
lb = services.get("lb", {})
check(redis and dsh and lb, where, "services redis, dsh and lb")
check(re.match(r"redis:7\.", redis.get("image", "")), where, "Redis 7.x")
command = " ".join(map(str, redis.get("command", [])))
check("--appendonly yes" in command, where, "Redis without AOF loses acknowledged writes")
check("--maxmemory-policy noeviction" in command, where, "Redis may evict session logs")
named = set((compose.get("volumes") or {}).keys())
check(
    any(v.split(":")[0] in named and v.split(":")[1] == "/data" for v in redis.get("volumes", [])),
    where,
    "Redis's /data (the AOF) on a named volume",
)
check("redis-cli ping" in json.dumps(redis.get("healthcheck", {})), where, "Redis healthcheck")
check(dsh.get("deploy", {}).get("replicas", 1) >= 3, where, "three replicas (deploy.replicas)")
check(
    dsh.get("depends_on", {}).get("redis", {}).get("condition") == "service_healthy",
    where,
    "replicas wait for a healthy Redis",
)
for name in ("dsh", "redis", "lb"):
    check(services.get(name, {}).get("restart") == "unless-stopped", where, f"{name} restarts")
env = env_list(dsh)
check(env.get("REDIS_URL", "").startswith("redis://redis:"), where, "replicas use the redis service")
for name in ("DSH_PROVIDER_KEY", "DSH_TOKEN_KEYS"):
    # Passed through from the environment, never written in the file.
    check(name in env and env[name] is None, where, f"{name} passed through, without a value")
check("${DSH_PROVIDER" in str(env.get("DSH_PROVIDER")), where, "DSH_PROVIDER from the environment")
check(
    lb.get("depends_on", {}).get("dsh", {}).get("condition") == "service_healthy",
    where,
    "nginx waits for healthy replicas",
)
check("healthcheck" in lb, where, "nginx healthcheck")
check(
    all(not str(p).startswith(("8080", "0.0.0.0")) for p in dsh.get("ports", [])),
    where,
    "replicas publish no port (only nginx does)",
)

# --- nginx.conf -----------------------------------------------------------------------------
where = "deploy/nginx.conf"
nginx = (DEPLOY / "nginx.conf").read_text()
for directive, why in (
    (r"proxy_buffering\s+off;", "SSE frames would be buffered"),
    (r"proxy_http_version\s+1\.1;", "SSE needs HTTP/1.1 to the replicas"),
    (r'proxy_set_header\s+Connection\s+"";', "SSE needs keep-alive to the replicas"),
    (r"proxy_read_timeout\s+\d+[hm];", "long-lived streams would be cut"),
    (r"server\s+dsh:8080", "the upstream is the replicas' service name"),
):
    check(re.search(directive, nginx), where, f"{directive}: {why}")
# A rolling restart without a 502 (deploy/README.md, Draining; tests/api/rolling.rs): nginx lets
# go of an idle connection before a replica closes it (after its own 5 s idle, or when it stops
# DSH_DRAIN_DELAY_MS after SIGTERM), and leaves a failed replica out only briefly.
idle = re.search(r"keepalive_timeout\s+(\d+)s;", nginx)
drain_ms = int(env.get("DSH_DRAIN_DELAY_MS") or 0)
check(
    idle and int(idle.group(1)) * 1000 < min(drain_ms, 5000),
    where,
    f"upstream keepalive_timeout shorter than 5 s and than compose's DSH_DRAIN_DELAY_MS "
    f"({drain_ms} ms): else a POST sent as a replica closes its connection gets 502",
)
bench = re.search(r"server\s+dsh:8080[^;]*fail_timeout=(\d+)s", nginx)
check(
    bench and int(bench.group(1)) <= 2,
    where,
    "fail_timeout of at most 2 s: else mid-restart every replica is left out (502, no live upstreams)",
)

# --- Dockerfile and .dockerignore -----------------------------------------------------------
where = "deploy/Dockerfile"
dockerfile = (DEPLOY / "Dockerfile").read_text()
check(re.search(r"^HEALTHCHECK\s", dockerfile, re.M), where, "HEALTHCHECK")
users = re.findall(r"^USER\s+(\S+)", dockerfile, re.M)
check(users and users[-1].split(":")[0] not in ("0", "root"), where, "runs as a non-root USER")
check(users and users[-1].split(":")[0].isdigit(), where, "numeric USER (runAsNonRoot checks it)")
check("ca-certificates" in dockerfile, where, "CA certificates (the provider speaks HTTPS)")
check(re.search(r"cargo build --release --locked", dockerfile), where, "locked release build")
check(re.search(r"^EXPOSE\s+8080", dockerfile, re.M), where, "EXPOSE 8080")
# Every directory a dependency or patch of Cargo.toml is built from (`{ path = "…" }`) is copied
# into the build stage, and not kept out of the context.
copied = set()
for sources in re.findall(r"^COPY\s+(?!--)(.+)$", dockerfile, re.M):
    copied |= {c.removeprefix("./").rstrip("/") for c in sources.split()[:-1]}
for path in re.findall(r'\{[^}]*\bpath\s*=\s*"([^"]+)"', (ROOT / "Cargo.toml").read_text()):
    top = path.removeprefix("./").split("/")[0]
    check(top in copied, where, f"COPY {top} (Cargo.toml builds from {path})")
where = ".dockerignore"
ignored = {
    line.strip()
    for line in (ROOT / ".dockerignore").read_text().splitlines()
    if line.strip() and not line.startswith("#")
}
for entry in ("target/", ".git", "**/node_modules/"):
    check(entry in ignored, where, f"{entry} kept out of the build context")
for top in copied:
    check(not ({top, top + "/", "/" + top, "/" + top + "/"} & ignored), where, f"{top} is COPYed: not ignored")

# --- kustomization.yaml lists every manifest, once ------------------------------------------
where = "deploy/kubernetes/kustomization.yaml"
kdir = DEPLOY / "kubernetes"
kustomization = yaml.safe_load((kdir / "kustomization.yaml").read_text())
listed = kustomization.get("resources", [])
present = sorted(p.name for p in kdir.glob("*.yaml") if p.name != "kustomization.yaml")
check(sorted(listed) == present, where, f"resources {sorted(listed)} != manifests {present}")

# --- the Deployment ------------------------------------------------------------------------
docs = [d for p in present for d in yaml.safe_load_all((kdir / p).read_text()) if d]
by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], []).append(d)
where = "deploy/kubernetes/deployment.yaml"
(deployment,) = [d for d in by_kind.get("Deployment", []) if d["metadata"]["name"] == "dsh-plan"]
pod = deployment["spec"]["template"]["spec"]
(container,) = pod["containers"]
check(deployment["spec"].get("replicas") == 3, where, "3 replicas")
check(container["readinessProbe"]["httpGet"]["path"] == "/readyz", where, "readiness on /readyz")
check(container["livenessProbe"]["httpGet"]["path"] == "/healthz", where, "liveness on /healthz")
check("preStop" in container.get("lifecycle", {}), where, "preStop delay before SIGTERM")
check(
    pod.get("terminationGracePeriodSeconds", 30)
    >= int(container["lifecycle"]["preStop"]["exec"]["command"][-1]) + 10,
    where,
    "grace period covers preStop + turn hand-over + request drain",
)
sc = container.get("securityContext", {})
check(sc.get("readOnlyRootFilesystem") is True, where, "read-only root filesystem")
check(pod.get("securityContext", {}).get("runAsNonRoot") is True, where, "runAsNonRoot")
check({"requests", "limits"} <= set(container.get("resources", {})), where, "requests and limits")
configmap_keys = set(by_kind["ConfigMap"][0]["data"])
secret_keys = set(by_kind["Secret"][0]["stringData"])
for ref in container.get("env", []):
    key = ref.get("valueFrom", {}).get("secretKeyRef")
    if key and not key.get("optional"):
        check(key["key"] in secret_keys, where, f"secret key {key['key']} missing from secret.yaml")
    for var in re.findall(r"\$\((\w+)\)", ref.get("value", "")):
        defined = configmap_keys | {e["name"] for e in container["env"]}
        check(var in defined, where, f"$({var}) is defined nowhere")
for key, value in by_kind["Secret"][0]["stringData"].items():
    check(value.startswith("REPLACE-ME"), "deploy/kubernetes/secret.yaml", f"{key}: placeholders only")
check("PodDisruptionBudget" in by_kind, "deploy/kubernetes", "a PodDisruptionBudget")
hpa = by_kind.get("HorizontalPodAutoscaler", [{}])[0]
check(hpa.get("apiVersion") == "autoscaling/v2", "deploy/kubernetes/hpa.yaml", "autoscaling/v2")
check(
    hpa.get("spec", {}).get("minReplicas", 0) >= 3, "deploy/kubernetes/hpa.yaml", "at least 3 replicas"
)

if failures:
    print("deploy checks failed:", *failures, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print(f"deploy checks: compose, nginx, Dockerfile, .dockerignore and {len(docs)} Kubernetes objects")
