"""Checks one rendered kustomize overlay of payhook (scripts/install-check.sh) for what docs/install.md promises of
its pod, and writes what `payhook config check` needs to check its configuration:

    install-check-k8s.py ALL.yaml OUT_DIR DEFAULT_TOML

OUT_DIR/payhook.toml is the ConfigMap's file; OUT_DIR/env has one NAME=VALUE a line, a dummy for every variable the
pod's Secrets would give (the API token, each source's secrets_env and confirm_token_env, the database URL).
"""

import sys
import tomllib

import yaml

docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
out = sys.argv[2]
defaults = tomllib.loads(sys.argv[3])
by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], []).append(d)


def check(condition, message):
    if not condition:
        sys.exit(f"{sys.argv[1]}: {message}")


workloads = by_kind.get("Deployment", []) + by_kind.get("StatefulSet", [])
check(len(workloads) == 1, f"one workload expected, found {[w['kind'] for w in workloads]}")
workload = workloads[0]
spec = workload["spec"]
pod = spec["template"]["spec"]
containers = {c["name"]: c for c in pod["containers"]}
check("payhook" in containers, "no payhook container")
c = containers["payhook"]
mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}

if workload["kind"] == "StatefulSet":
    # One writer: one replica, its database on a claim of its own.
    check(spec["replicas"] == 1, f"a SQLite StatefulSet has {spec['replicas']} replicas")
    claims = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])}
    check("/var/lib/payhook" in mounts and mounts["/var/lib/payhook"]["name"] in claims,
          "the database directory is not on a volume claim")
else:
    check(spec["replicas"] >= 2, f"a PostgreSQL Deployment has {spec['replicas']} replicas")
    labels = spec["template"]["metadata"]["labels"]
    pdbs = [p for p in by_kind.get("PodDisruptionBudget", [])
            if all(labels.get(k) == v for k, v in p["spec"]["selector"]["matchLabels"].items())]
    check(pdbs, "no PodDisruptionBudget selects the pods")
    urls = [e for e in c.get("env", []) if e["name"] == "PAYHOOK_STORAGE__URL"]
    check(urls and "secretKeyRef" in urls[0].get("valueFrom", {}), "the database URL is not from a Secret")

config_maps = {m["metadata"]["name"]: m for m in by_kind.get("ConfigMap", [])}
volumes = {v["name"]: v for v in pod.get("volumes", [])}
check("/etc/payhook" in mounts, "no configuration mounted at /etc/payhook")
config_volume = volumes[mounts["/etc/payhook"]["name"]]
check(config_volume.get("configMap", {}).get("name") in config_maps, "the configuration is not the ConfigMap")
config_text = config_maps[config_volume["configMap"]["name"]]["data"]["payhook.toml"]
config = tomllib.loads(config_text)

grace_ms = config.get("server", {}).get("shutdown_grace_ms", defaults["server"]["shutdown_grace_ms"])
check(pod["terminationGracePeriodSeconds"] * 1000 > grace_ms,
      f"terminationGracePeriodSeconds {pod['terminationGracePeriodSeconds']} is not above the {grace_ms} ms grace")
check(pod["securityContext"].get("runAsNonRoot") is True, "runAsNonRoot is not set on the pod")
check(pod["securityContext"].get("seccompProfile", {}).get("type") == "RuntimeDefault", "no RuntimeDefault seccomp")
check(pod.get("automountServiceAccountToken") is False, "the pod carries a service account token")
check(pod.get("enableServiceLinks") is False, "service links would add PAYHOOK_* variables")
check(c["livenessProbe"]["httpGet"]["path"] == "/healthz", "liveness is not /healthz")
check(c["readinessProbe"]["httpGet"]["path"] == "/readyz", "readiness is not /readyz")
sc = c["securityContext"]
check(sc.get("readOnlyRootFilesystem") is True, "the root file system is writable")
check(sc.get("allowPrivilegeEscalation") is False, "privilege escalation is allowed")
check(sc.get("capabilities", {}).get("drop") == ["ALL"], "capabilities are not all dropped")
check({"cpu", "memory"} <= set(c["resources"].get("requests", {})), "no cpu and memory requests")
check("memory" in c["resources"].get("limits", {}), "no memory limit")
check("/tmp" in mounts, "no writable /tmp (SQLite's temporary files) on a read-only root")
secret_refs = [e["secretRef"]["name"] for e in c.get("envFrom", []) if "secretRef" in e]
check(secret_refs, "the token and the providers' secrets are not from a Secret")

env = {config.get("server", {}).get("api_token_env", "PAYHOOK_API_TOKEN"): "k8s-check-token-0123456789abcdef"}
for source in config.get("sources", []):
    for key in ("secrets_env", "confirm_token_env"):
        if key in source:
            env[source[key]] = f"dummy-{source['name']}-secret"
for e in c.get("env", []):
    if e["name"] == "PAYHOOK_STORAGE__URL":
        env[e["name"]] = "postgres://payhook:dummy@db.internal:5432/payhook?sslmode=verify-full"
    elif "value" in e:
        env[e["name"]] = e["value"]
with open(f"{out}/payhook.toml", "w") as f:
    f.write(config_text)
with open(f"{out}/env", "w") as f:
    f.write("".join(f"{k}={v}\n" for k, v in env.items()))
