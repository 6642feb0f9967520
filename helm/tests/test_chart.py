#!/usr/bin/env python3
"""Checks of the loghaul Helm chart, run by .ci/helm-check.

Renders the chart with real Helm (helm-python-sdk: Helm 4 as a library, no helm
binary) in several configurations and asserts what an operator relies on, then
validates every rendered manifest against the Kubernetes 1.30 schemas in strict
mode with kubernetes-validate.

Run: python helm/tests/test_chart.py   (needs helm-python-sdk, kubernetes-validate)
Plain asserts; prints one line per check and a final "N passed, M failed" line;
exits non-zero when anything failed.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import sys
import time
import tomllib
import traceback
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml

HERE = Path(__file__).resolve().parent
CHART_DIR = HERE.parent / "loghaul"
REPO_ROOT = HERE.parent.parent
KUBE_VERSION = "1.30.0"
RELEASE = "loghaul"
NAMESPACE = "logs"
FULLNAME = "loghaul"  # release "loghaul" + chart "loghaul" -> "loghaul"

# Custom resources: not part of the Kubernetes schemas, so kubernetes-validate
# cannot check them. These kinds, and only these, are skipped (and counted).
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}

# The `loghaul serve` flags a config file may set (the service refuses unknown keys).
SERVE_FLAGS = {
    "listen", "metrics-listen", "database-url", "shards", "batch-max-rows",
    "batch-max-bytes", "batch-linger", "queue-capacity", "enqueue-timeout",
    "max-buffered-bytes", "max-message-bytes", "max-request-bytes",
    "tenant-buffer-share", "min-body-rate", "min-body-rate-grace",
    "store-retry-timeout", "db-max-connections", "max-connection-age",
    "max-connection-age-grace", "shutdown-grace", "log-format",
    "api-keys-file", "api-keys", "tenant-records-per-second", "tenant-bytes-per-second",
    "tenant-burst", "retention", "retention-interval", "seal-after", "seal-interval", "seal-busy-percent", "dedup-window", "read-max-connections",
    "tail-poll-interval", "tail-queue-bytes", "max-tails-per-tenant", "max-tails", "max-concurrent-reads-per-tenant",
    "query-default-range", "query-timeout", "max-page-bytes", "max-read-bytes", "max-query-bytes",
    "max-query-series", "console-listen",
    "stream-idle-timeout", "tls-cert", "tls-key", "tls-client-ca", "http-header-read-timeout",
    "http-max-connections", "allow-unauthenticated", "api-keys-reload-interval",
    "http-listen", "http-cors-origins", "http-ingest-max-connections", "allow-org-id-tenants",
}
TLS_KEYS = {"tls-cert", "tls-key", "tls-client-ca"}
# http-cors-origins appears only when config.httpCorsOrigins is set (see http_cors_origins_render).
CORS_KEYS = {"http-cors-origins"}
# The database URL comes from a Secret (env) and the API keys from a mounted Secret file
# (--api-keys-file in the container's args), never from the ConfigMap.
# TLS keys appear only with tls.enabled (see tls_mounts_the_secret_and_sets_the_paths).
# The chart never serves without keys, so it never renders allow-unauthenticated, nor
# allow-org-id-tenants (which only a keyless service reads).
KEYLESS_KEYS = {"allow-unauthenticated", "allow-org-id-tenants"}
TOML_KEYS = SERVE_FLAGS - {"database-url", "api-keys", "api-keys-file"} - KEYLESS_KEYS - TLS_KEYS - CORS_KEYS
HTTP_PORT_NAME = "otlp-http"

POSTGRES_URL = "postgres://loghaul:s3cret@db.example.internal:5432/logs"

# Every optional feature on.
FULL = {
    "replicaCount": 3,
    "database": {"url": POSTGRES_URL},
    "apiKeys": {"key-b": "tenant_b", "key-a": "tenant_a"},
    "autoscaling": {
        "enabled": True,
        "minReplicas": 3,
        "maxReplicas": 12,
        "queueUtilization": {"enabled": True, "averageValue": "600m"},
    },
    "podDisruptionBudget": {"enabled": True},
    "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "prometheusRule": {"enabled": True, "alertLabels": {"team": "logging"}},
    "networkPolicy": {
        "enabled": True,
        "grpc": {"from": [{"namespaceSelector": {"matchLabels": {"loghaul-client": "true"}}}]},
    },
    "dashboards": {"enabled": True, "annotations": {"grafana_folder": "Logging"}},
    "grafanaDatasource": {"enabled": True},
    "service": {"headless": {"enabled": True}},
    "preStopSleepSeconds": 5,
    "imagePullSecrets": [{"name": "regcred"}],
    "podAnnotations": {"example.com/owner": "sre"},
    "podLabels": {"team": "logging"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "logging", "effect": "NoSchedule"}],
    "extraEnv": [{"name": "RUST_LOG", "value": "info"}],
    "priorityClassName": "high-priority",
    "tls": {"enabled": True, "secretName": "loghaul-tls", "clientAuth": True},
}

EXISTING_SECRETS = {
    "database": {"existingSecret": "db-credentials", "existingSecretKey": "url"},
    "apiKeysExistingSecret": "ingest-keys",
    "apiKeysExistingSecretKey": "keys",
}

# The alerts the chart promises, with the release selector stripped from the expressions.
EXPECTED_ALERTS = {
    "LoghaulQueueSaturated": ("max by (pod) (loghaul_queue_depth / loghaul_queue_capacity) > 0.9", "5m"),
    "LoghaulInsertErrors": ("rate(loghaul_insert_errors_total[5m]) > 0", None),
    "LoghaulRejectionsRising": (
        "sum(rate(loghaul_records_rejected_total[5m])) / sum(rate(loghaul_records_received_total[5m])) > 0.05",
        None,
    ),
    "LoghaulBackpressureTimeouts": ("rate(loghaul_backpressure_timeouts_total[5m]) > 0", None),
    "LoghaulNotReady": ("loghaul_ready == 0", "5m"),
    "LoghaulStoreDown": ("loghaul_store_up == 0", None),
}

DATASOURCE = f"{FULLNAME}-datasource"
DATASOURCE_FILE = f"{FULLNAME}-datasource.yaml"

KEYS_FILE = "/etc/loghaul-keys/keys.toml"
KEYS_SECRET = f"{FULLNAME}-api-keys"

CHART: helm.Chart | None = None


# ---------------------------------------------------------------- helpers


def chart() -> helm.Chart:
    global CHART
    if CHART is None:
        CHART = helm.Chart.load(str(CHART_DIR))
    return CHART


def merged(*layers: dict) -> dict:
    """Deep-merges value layers (later wins), like repeated -f files."""
    out: dict = {}
    for layer in layers:
        _deep_merge(out, copy.deepcopy(layer))
    return out


def _deep_merge(dst: dict, src: dict) -> None:
    for key, value in src.items():
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            _deep_merge(dst[key], value)
        else:
            dst[key] = value


def render(values: dict | None = None) -> dict[str, str]:
    return chart().render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)


def manifests(rendered: dict[str, str]) -> list[dict]:
    docs = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc.setdefault("__source__", path)
                docs.append(doc)
    return docs


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in of_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def deployment(docs: list[dict]) -> dict:
    return one(docs, "Deployment", FULLNAME)


def container(docs: list[dict]) -> dict:
    containers = deployment(docs)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, containers
    return containers[0]


def env_of(ctr: dict) -> dict[str, dict]:
    return {e["name"]: e for e in ctr.get("env", [])}


def config_toml(docs: list[dict]) -> dict:
    cm = one(docs, "ConfigMap", FULLNAME)
    return tomllib.loads(cm["data"]["loghaul.toml"])


def secret_data(secret: dict) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()}


def keys_file(docs: list[dict]) -> dict:
    """The keys file in the chart's API keys Secret, parsed as the service parses it."""
    return tomllib.loads(secret_data(one(docs, "Secret", KEYS_SECRET))["keys.toml"])


def keys_volume(docs: list[dict]) -> dict:
    pod = deployment(docs)["spec"]["template"]["spec"]
    volumes = [v for v in pod["volumes"] if v["name"] == "api-keys"]
    assert len(volumes) == 1, pod["volumes"]
    return volumes[0]


def pod_annotations(docs: list[dict]) -> dict:
    return deployment(docs)["spec"]["template"]["metadata"].get("annotations", {})


def expect_render_failure(values: dict, *fragments: str) -> str:
    try:
        render(values)
    except helm.HelmError as err:
        message = str(err)
        for fragment in fragments:
            assert fragment in message, f"error message lacks {fragment!r}: {message}"
        return message
    raise AssertionError(f"rendering {values} should have failed")


def expect_schema_rejects(values: dict, fragment: str) -> None:
    try:
        chart().validate_schema(values)
    except helm.HelmValuesError as err:
        assert fragment in str(err), f"schema error lacks {fragment!r}: {err}"
    else:
        raise AssertionError(f"values.schema.json accepted {values}")
    # and an install with those values is refused too, not just the explicit check
    try:
        render(values)
    except helm.HelmValuesError:
        return
    raise AssertionError(f"render accepted {values} despite the schema")


def duration_seconds(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", text)
    assert m, f"unexpected duration {text!r}"
    return int(m.group(1)) * units[m.group(2)]


def strip_selector(expr: str) -> str:
    sel = f'{{job="{FULLNAME}", namespace="{NAMESPACE}"}}'
    assert sel in expr, f"alert expression is not scoped to the release ({sel}): {expr}"
    return expr.replace(sel, "")


# ---------------------------------------------------------------- checks

TESTS = []


def check(fn):
    TESTS.append(fn)
    return fn


@check
def chart_metadata_matches_crate():
    meta = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2"
    assert meta["name"] == "loghaul"
    assert meta["version"] == "0.1.0"
    assert isinstance(meta["appVersion"], str)
    cargo = tomllib.loads((REPO_ROOT / "Cargo.toml").read_text())
    assert meta["appVersion"] == cargo["package"]["version"], (meta["appVersion"], cargo["package"]["version"])


@check
def lint_passes():
    for label, values in [("defaults", None), ("all features", FULL), ("existing secrets", EXISTING_SECRETS),
                          ("http ingest off", {"config": {"httpListenEnabled": False}})]:
        report = helm.lint(str(CHART_DIR), values, strict=True, kube_version="v" + KUBE_VERSION)
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert not problems and not report["errors"], f"lint ({label}): {problems or report['errors']}"
        assert report["total_charts_linted"] == 1


@check
def serve_flags_match_the_service_source():
    """The chart's list of TOML keys is the flags of `loghaul serve` (minus --config).

    Read from the options table of docs/configuration.md, which `cargo test` keeps equal to the
    clap definitions: the Rust source spreads the options over several structs.
    """
    docs = (REPO_ROOT / "docs" / "configuration.md").read_text()
    start, end = docs.find("<!-- options table:"), docs.find("<!-- end of the options table -->")
    assert 0 <= start < end, "options table not found in docs/configuration.md"
    fields = set(re.findall(r"^\| `--([a-z0-9-]+)` \|", docs[start:end], re.M))
    fields.discard("config")
    expected = SERVE_FLAGS
    assert fields == expected, f"flags differ: source-only {fields - expected}, chart-only {expected - fields}"


@check
def every_values_key_is_documented():
    lines = (CHART_DIR / "values.yaml").read_text().splitlines()
    undocumented = []
    for i, line in enumerate(lines):
        if not re.match(r"^\s*(- )?[A-Za-z_][\w./-]*:(\s|$)", line):
            continue
        if re.search(r"\s#\s", line):
            continue
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j < 0 or not lines[j].strip().startswith("#"):
            undocumented.append(f"{i + 1}: {line.strip()}")
    assert not undocumented, "keys without a comment: " + "; ".join(undocumented)


@check
def schema_rejects_unknown_keys_and_wrong_types():
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    chart().validate_schema({})  # defaults are valid
    chart().validate_schema(FULL)
    chart().validate_schema(EXISTING_SECRETS)
    expect_schema_rejects({"replicaCountt": 2}, "replicaCountt")
    expect_schema_rejects({"replicaCount": "three"}, "replicaCount")
    expect_schema_rejects({"config": {"batchLinger": 50}}, "batchLinger")
    expect_schema_rejects({"config": {"batchMaxBytes": "8 parsecs"}}, "batchMaxBytes")
    expect_schema_rejects({"config": {"flushEvery": "1s"}}, "flushEvery")
    expect_schema_rejects({"config": {"logFormat": "xml"}}, "logFormat")
    expect_schema_rejects({"autoscaling": {"enabled": "yes"}}, "enabled")
    expect_schema_rejects({"apiKeys": {"k": 5}}, "apiKeys")
    expect_schema_rejects({"config": {"httpListenEnabled": "no"}}, "httpListenEnabled")
    expect_schema_rejects({"containerPorts": {"http": 70000}}, "http")
    expect_schema_rejects({"config": {"httpIngestMaxConnections": 0}}, "httpIngestMaxConnections")
    expect_schema_rejects({"networkPolicy": {"http": {"from": "everyone"}}}, "from")


@check
def defaults_are_sqlite_with_persistence():
    docs = manifests(render())
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        ["ConfigMap", "Deployment", "PersistentVolumeClaim", "PodDisruptionBudget", "Secret", "Secret", "Service",
         "ServiceAccount"]
    ), kinds
    dep = deployment(docs)
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}, dep["spec"]["strategy"]
    pvc = one(docs, "PersistentVolumeClaim", f"{FULLNAME}-data")
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    pod = dep["spec"]["template"]["spec"]
    data = [v for v in pod["volumes"] if v["name"] == "data"]
    assert data == [{"name": "data", "persistentVolumeClaim": {"claimName": f"{FULLNAME}-data"}}], data
    mounts = {m["name"]: m["mountPath"] for m in container(docs)["volumeMounts"]}
    assert mounts["data"] == "/data"
    assert secret_data(one(docs, "Secret", FULLNAME)) == {"database-url": "sqlite:///data/loghaul.db"}
    assert not of_kind(docs, "Job"), "no migration Job for SQLite"
    assert pod["securityContext"]["fsGroup"] == 65532, "the PVC must be writable by the nonroot user"


@check
def deployment_container_wiring():
    docs = manifests(render())
    ctr = container(docs)
    assert ctr["image"] == "loghaul/loghaul:0.1.0", ctr["image"]  # tag defaults to appVersion
    assert ctr["args"] == ["serve", "--config", "/etc/loghaul/loghaul.toml", "--api-keys-file", KEYS_FILE], ctr["args"]
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert ports == {"grpc": 4317, "metrics": 9464, HTTP_PORT_NAME: 4318}, ports
    assert all(len(name) <= 15 for name in ports), "a port name is at most 15 characters"
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert ctr["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    env = env_of(ctr)
    assert env["LOGHAUL_LOG_FORMAT"] == {"name": "LOGHAUL_LOG_FORMAT", "value": "json"}
    assert env["LOGHAUL_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": FULLNAME, "key": "database-url"}
    assert "LOGHAUL_API_KEYS" not in env, "keys come from the mounted file"
    pod = deployment(docs)["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False, "service links would inject LOGHAUL_* variables"
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == FULLNAME
    one(docs, "ServiceAccount", FULLNAME)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["tmp"]
    assert volumes["config"]["configMap"]["name"] == FULLNAME
    mounts = {m["name"]: m for m in ctr["volumeMounts"]}
    assert mounts["tmp"]["mountPath"] == "/tmp"
    assert mounts["config"]["mountPath"] == "/etc/loghaul" and mounts["config"]["readOnly"] is True
    res = ctr["resources"]
    assert res["requests"] == {"cpu": "500m", "memory": "512Mi"} and res["limits"] == {"memory": "1Gi"}, res
    # image tag override
    ctr2 = container(manifests(render({"image": {"tag": "0.2.0-rc1"}})))
    assert ctr2["image"].endswith(":0.2.0-rc1")


@check
def security_context_is_locked_down():
    for values in (None, FULL):
        docs = manifests(render(values))
        pod = deployment(docs)["spec"]["template"]["spec"]
        ctx = container(docs)["securityContext"]
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == 65532
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"]
        assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    job = one(manifests(render({"database": {"url": POSTGRES_URL}})), "Job")
    jctx = job["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert jctx["readOnlyRootFilesystem"] is True and jctx["capabilities"]["drop"] == ["ALL"]


@check
def termination_grace_derives_from_shutdown_grace():
    for values, grace, expected in [
        ({}, 20, 30),
        ({"config": {"shutdownGraceSeconds": 45}}, 45, 55),
        ({"config": {"shutdownGraceSeconds": 45}, "shutdownMarginSeconds": 15}, 45, 60),
        ({"preStopSleepSeconds": 5}, 20, 35),
    ]:
        docs = manifests(render(values))
        toml_grace = duration_seconds(config_toml(docs)["shutdown-grace"])
        tgps = deployment(docs)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert toml_grace == grace, (values, toml_grace)
        assert tgps == expected, (values, tgps)
        assert tgps > toml_grace
    ctr = container(manifests(render({"preStopSleepSeconds": 5})))
    assert ctr["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    assert "lifecycle" not in container(manifests(render()))


@check
def tls_mounts_the_secret_and_sets_the_paths():
    assert "tls-cert" not in config_toml(manifests(render()))
    docs = manifests(render({"tls": {"enabled": True, "secretName": "loghaul-tls", "clientAuth": True}}))
    cfg = config_toml(docs)
    assert {k: cfg[k] for k in TLS_KEYS} == {
        "tls-cert": "/etc/loghaul-tls/tls.crt",
        "tls-key": "/etc/loghaul-tls/tls.key",
        "tls-client-ca": "/etc/loghaul-tls/ca.crt",
    }
    pod = deployment(docs)["spec"]["template"]["spec"]
    assert {"name": "tls", "secret": {"secretName": "loghaul-tls"}} in pod["volumes"]
    mounts = container(docs)["volumeMounts"]
    assert {"name": "tls", "mountPath": "/etc/loghaul-tls", "readOnly": True} in mounts
    assert "tls-client-ca" not in config_toml(manifests(render({"tls": {"enabled": True, "secretName": "s"}})))


@check
def config_toml_has_only_known_keys():
    docs = manifests(render())
    cfg = config_toml(docs)
    assert set(cfg) <= TOML_KEYS, f"unknown keys: {set(cfg) - TOML_KEYS}"
    assert set(cfg) == TOML_KEYS, f"missing keys: {TOML_KEYS - set(cfg)}"
    assert cfg["listen"] == "0.0.0.0:4317" and cfg["metrics-listen"] == "0.0.0.0:9464"
    assert cfg["http-listen"] == "0.0.0.0:4318"
    assert cfg["batch-max-rows"] == 20000 and isinstance(cfg["batch-max-rows"], int)
    assert cfg["queue-capacity"] == 64 and cfg["db-max-connections"] == 0
    for key, value in [("batch-max-bytes", "16MiB"), ("max-buffered-bytes", "64MiB"), ("max-message-bytes", "256KiB"),
                       ("max-request-bytes", "4MiB"), ("batch-linger", "10ms"), ("enqueue-timeout", "5s"),
                       ("store-retry-timeout", "15s"), ("max-connection-age", "10m"),
                       ("max-connection-age-grace", "30s"), ("shutdown-grace", "20s"), ("log-format", "json"),
                       ("tenant-records-per-second", 0), ("tenant-bytes-per-second", "0"), ("tenant-burst", "2s"),
                       ("retention", "7d"), ("retention-interval", "10m"), ("seal-after", "1h"),
                       ("seal-interval", "5m"), ("seal-busy-percent", 10), ("dedup-window", "24h"),
                       ("read-max-connections", 4), ("max-tails-per-tenant", 32), ("max-tails", 256), ("max-concurrent-reads-per-tenant", 2), ("query-default-range", "24h"), ("query-timeout", "10s"), ("max-page-bytes", "2MiB"),
                       ("max-read-bytes", "256MiB"), ("max-query-bytes", "64MiB"), ("max-query-series", 500),
                       ("tail-poll-interval", "500ms"), ("tail-queue-bytes", "4MiB"), ("console-listen", "127.0.0.1:8080"),
                       ("stream-idle-timeout", "60s"), ("http-header-read-timeout", "10s"),
                       ("http-max-connections", 256), ("api-keys-reload-interval", "5s"),
                       ("http-ingest-max-connections", 1024), ("tenant-buffer-share", 50),
                       ("min-body-rate", "64KiB"), ("min-body-rate-grace", "5s")]:
        assert cfg[key] == value, (key, cfg[key])
    # every config value reaches the file
    custom = {
        "shards": 4, "batchMaxRows": 1234, "batchMaxBytes": "16MiB", "batchLinger": "20ms",
        "queueCapacity": 32, "enqueueTimeout": "2s", "maxBufferedBytes": "128MiB", "maxMessageBytes": "1MiB",
        "maxRequestBytes": "8MiB", "storeRetryTimeout": "30s", "dbMaxConnections": 9,
        "maxConnectionAge": "5m", "maxConnectionAgeGrace": "1m", "shutdownGraceSeconds": 40, "logFormat": "text",
        "bindAddress": "[::]", "tenantRecordsPerSecond": 2500.5, "tenantBytesPerSecond": "4MiB",
        "tenantBurst": "5s", "retention": "30d", "retentionInterval": "5m", "sealAfter": "2h", "sealInterval": "1m", "sealBusyPercent": 50, "dedupWindow": "2h",
        "readMaxConnections": 2, "maxTailsPerTenant": 8, "maxTails": 100, "maxConcurrentReadsPerTenant": 3, "queryDefaultRange": "1h", "queryTimeout": "30s", "maxPageBytes": "1MiB",
        "maxReadBytes": "512MiB", "maxQueryBytes": "128MiB", "maxQuerySeries": 2000,
        "tailPollInterval": "1s", "tailQueueBytes": "8MiB", "consoleListen": "off", "streamIdleTimeout": "2m",
        "httpHeaderReadTimeout": "5s", "httpMaxConnections": 64, "apiKeysReloadInterval": "30s",
        "httpListenEnabled": True, "httpCorsOrigins": "https://app.example.com", "httpIngestMaxConnections": 4096,
        "tenantBufferShare": 25, "minBodyRate": "16KiB", "minBodyRateGrace": "10s",
    }
    cfg2 = config_toml(manifests(render({"config": custom, "containerPorts": {"grpc": 5000, "http": 5318}})))
    assert cfg2 == {
        "listen": "[::]:5000", "metrics-listen": "[::]:9464", "http-listen": "[::]:5318",
        "http-cors-origins": "https://app.example.com", "shards": 4, "batch-max-rows": 1234,
        "batch-max-bytes": "16MiB", "batch-linger": "20ms", "queue-capacity": 32, "enqueue-timeout": "2s",
        "max-buffered-bytes": "128MiB", "max-message-bytes": "1MiB", "max-request-bytes": "8MiB",
        "store-retry-timeout": "30s", "db-max-connections": 9, "max-connection-age": "5m",
        "max-connection-age-grace": "1m", "shutdown-grace": "40s", "log-format": "text",
        "tenant-records-per-second": 2500.5, "tenant-bytes-per-second": "4MiB", "tenant-burst": "5s",
        "retention": "30d", "retention-interval": "5m", "seal-after": "2h", "seal-interval": "1m", "seal-busy-percent": 50, "dedup-window": "2h", "read-max-connections": 2, "max-tails-per-tenant": 8, "max-tails": 100, "max-concurrent-reads-per-tenant": 3, "query-default-range": "1h", "query-timeout": "30s", "max-page-bytes": "1MiB",
        "max-read-bytes": "512MiB", "max-query-bytes": "128MiB", "max-query-series": 2000,
        "tail-poll-interval": "1s", "tail-queue-bytes": "8MiB", "console-listen": "off", "stream-idle-timeout": "2m",
        "http-header-read-timeout": "5s", "http-max-connections": 64, "api-keys-reload-interval": "30s",
        "http-ingest-max-connections": 4096, "tenant-buffer-share": 25, "min-body-rate": "16KiB",
        "min-body-rate-grace": "10s",
    }, cfg2
    assert "database" not in one(docs, "ConfigMap", FULLNAME)["data"]["loghaul.toml"].replace("database URL", "")


@check
def checksum_annotations_roll_pods():
    rendered = render()
    docs = manifests(rendered)
    ann = pod_annotations(docs)
    cm_text = rendered["loghaul/templates/configmap.yaml"]
    assert ann["checksum/config"] == hashlib.sha256(cm_text.encode()).hexdigest(), "checksum/config is not the ConfigMap's sha256"
    assert re.fullmatch(r"[0-9a-f]{64}", ann["checksum/secret"])
    changed = pod_annotations(manifests(render({"config": {"batchMaxRows": 1000}})))
    assert changed["checksum/config"] != ann["checksum/config"], "config change must change checksum/config"
    assert changed["checksum/secret"] == ann["checksum/secret"]
    # The pods reload the keys file: a key rotation must not restart them.
    rotated = pod_annotations(manifests(render({"apiKeys": {"new-key": "team"}})))
    assert rotated == ann, "changing the API keys must not roll pods"
    unrelated = pod_annotations(manifests(render({"podLabels": {"x": "y"}})))
    assert unrelated["checksum/config"] == ann["checksum/config"], "unrelated change must not roll pods"
    pg = pod_annotations(manifests(render({"database": {"url": POSTGRES_URL}})))
    pg2 = pod_annotations(manifests(render({"database": {"url": POSTGRES_URL + "?sslmode=require"}})))
    assert pg["checksum/secret"] != pg2["checksum/secret"], "secret change must change checksum/secret"
    full = pod_annotations(manifests(render(FULL)))
    assert full["example.com/owner"] == "sre" and "checksum/config" in full


@check
def services_name_ports_and_protocols():
    docs = manifests(render(FULL))
    svc = one(docs, "Service", FULLNAME)
    assert svc["spec"]["type"] == "ClusterIP"
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert ports["grpc"]["port"] == 4317 and ports["grpc"]["targetPort"] == "grpc" and ports["grpc"]["appProtocol"] == "grpc"
    assert ports["metrics"]["port"] == 9464 and ports["metrics"]["targetPort"] == "metrics" and ports["metrics"]["appProtocol"] == "http"
    http = ports[HTTP_PORT_NAME]
    assert (http["port"], http["targetPort"], http["protocol"], http["appProtocol"]) == (4318, HTTP_PORT_NAME, "TCP", "http"), http
    assert set(ports) == {"grpc", "metrics", HTTP_PORT_NAME}, sorted(ports)
    custom = {p["name"]: p for p in one(manifests(render({"service": {"ports": {"http": 8080}}})), "Service", FULLNAME)["spec"]["ports"]}
    assert custom[HTTP_PORT_NAME]["port"] == 8080 and custom[HTTP_PORT_NAME]["targetPort"] == HTTP_PORT_NAME
    pod_labels = deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items()), "Service does not select the pods"
    assert deployment(docs)["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    headless = one(docs, "Service", f"{FULLNAME}-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert [(p["name"], p["appProtocol"]) for p in headless["spec"]["ports"]] == [("grpc", "grpc")]
    assert headless["spec"]["selector"] == svc["spec"]["selector"]
    assert not [d for d in manifests(render()) if d["kind"] == "Service" and d["metadata"]["name"].endswith("-headless")]


@check
def replicas_land_on_different_nodes():
    pod = deployment(manifests(render({"database": {"url": POSTGRES_URL}, "replicaCount": 3})))["spec"]["template"]["spec"]
    selector = {"app.kubernetes.io/name": "loghaul", "app.kubernetes.io/instance": RELEASE}
    pref = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert pref[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert pref[0]["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    tsc = pod["topologySpreadConstraints"]
    assert len(tsc) == 1 and tsc[0]["topologyKey"] == "kubernetes.io/hostname" and tsc[0]["maxSkew"] == 1
    assert tsc[0]["labelSelector"]["matchLabels"] == selector
    assert tsc[0]["matchLabelKeys"] == ["pod-template-hash"]
    hard = deployment(manifests(render({"podAntiAffinityPreset": "hard"})))["spec"]["template"]["spec"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" in hard["affinity"]["podAntiAffinity"]
    custom = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["logging"]}]}]}}}
    pod2 = deployment(manifests(render({"affinity": custom, "topologySpreadConstraints": []})))["spec"]["template"]["spec"]
    assert pod2["affinity"] == custom and "topologySpreadConstraints" not in pod2
    pod3 = deployment(manifests(render({"podAntiAffinityPreset": "none"})))["spec"]["template"]["spec"]
    assert "affinity" not in pod3


@check
def all_features_render():
    rendered = render(FULL)
    docs = manifests(rendered)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted([
        "ConfigMap", "ConfigMap", "ConfigMap", "Deployment", "HorizontalPodAutoscaler", "Job", "NetworkPolicy",
        "PodDisruptionBudget", "PrometheusRule", "Secret", "Secret", "Secret", "Service", "Service", "ServiceAccount",
        "ServiceMonitor",
    ]), kinds
    assert not of_kind(docs, "PersistentVolumeClaim"), "no PVC with PostgreSQL"
    dep = deployment(docs)
    assert "replicas" not in dep["spec"], "the HPA owns the replica count"
    assert dep["spec"]["strategy"]["type"] == "RollingUpdate"
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = dep["spec"]["template"]["spec"]
    assert "data" not in {v["name"] for v in pod["volumes"]}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"][0]["key"] == "dedicated"
    assert pod["priorityClassName"] == "high-priority"
    assert dep["spec"]["template"]["metadata"]["labels"]["team"] == "logging"
    assert env_of(container(docs))["RUST_LOG"]["value"] == "info"
    keys = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert len(keys) == len(docs), "duplicate resource names"
    notes = rendered["loghaul/templates/NOTES.txt"]
    assert f"{FULLNAME}.{NAMESPACE}.svc:4317" in notes and f"dns:///{FULLNAME}-headless.{NAMESPACE}.svc:4317" in notes
    assert "port-forward" in notes and "/metrics" in notes and "x-api-key" in notes
    # FULL enables TLS, which covers the HTTP ingest port too.
    assert f"https://{FULLNAME}.{NAMESPACE}.svc:4318/v1/logs" in notes
    assert f"https://{FULLNAME}.{NAMESPACE}.svc:4318/loki/api/v1/push" in notes


@check
def autoscaler_cpu_and_queue_metric():
    hpa = one(manifests(render(FULL)), "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": FULLNAME}
    assert hpa["spec"]["minReplicas"] == 3 and hpa["spec"]["maxReplicas"] == 12
    metrics = hpa["spec"]["metrics"]
    assert metrics[0] == {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}
    assert metrics[1] == {"type": "Pods", "pods": {"metric": {"name": "loghaul_queue_utilization"},
                                                   "target": {"type": "AverageValue", "averageValue": "600m"}}}
    cpu_only = one(manifests(render({"database": {"url": POSTGRES_URL}, "autoscaling": {"enabled": True}})), "HorizontalPodAutoscaler")
    assert [m["type"] for m in cpu_only["spec"]["metrics"]] == ["Resource"]
    expect_render_failure({"database": {"url": POSTGRES_URL},
                           "autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}}, "minReplicas")


@check
def disruption_budget():
    pdb = one(manifests(render(FULL)), "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"] == deployment(manifests(render(FULL)))["spec"]["selector"]["matchLabels"]
    pdb2 = one(manifests(render(merged(FULL, {"podDisruptionBudget": {"minAvailable": 2}}))), "PodDisruptionBudget")
    assert pdb2["spec"]["minAvailable"] == 2 and "maxUnavailable" not in pdb2["spec"]
    assert not of_kind(manifests(render({"podDisruptionBudget": {"enabled": False}})), "PodDisruptionBudget")


@check
def service_monitor_scrapes_metrics_once():
    docs = manifests(render(FULL))
    sm = one(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert len(sm["spec"]["endpoints"]) == 1
    ep = sm["spec"]["endpoints"][0]
    assert ep["port"] == "metrics" and ep["path"] == "/metrics"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    wanted = sm["spec"]["selector"]["matchLabels"]
    selected = [d["metadata"]["name"] for d in of_kind(docs, "Service")
                if all(d["metadata"]["labels"].get(k) == v for k, v in wanted.items())]
    assert selected == [FULLNAME], f"ServiceMonitor selects {selected}, expected only the main Service"


@check
def prometheus_rule_alerts():
    rule = one(manifests(render(FULL)), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    alerts = {r["alert"]: r for r in rules}
    assert set(alerts) == set(EXPECTED_ALERTS), sorted(alerts)
    for name, (expr, for_) in EXPECTED_ALERTS.items():
        alert = alerts[name]
        assert strip_selector(alert["expr"]) == expr, (name, alert["expr"])
        if for_:
            assert alert["for"] == for_, (name, alert.get("for"))
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert alert["labels"]["team"] == "logging"
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
        assert "{{ $labels" in alert["annotations"]["description"] or "{{ $value" in alert["annotations"]["description"]
    assert alerts["LoghaulStoreDown"]["labels"]["severity"] == "critical"
    custom = one(manifests(render(merged(FULL, {"prometheusRule": {"metricSelector": 'app="loghaul"'}}))), "PrometheusRule")
    exprs = [r["expr"] for g in custom["spec"]["groups"] for r in g["rules"]]
    assert all('{app="loghaul"}' in e and "job=" not in e for e in exprs), exprs


@check
def network_policy_restricts_ingress():
    np = one(manifests(render(FULL)), "NetworkPolicy")
    assert np["spec"]["policyTypes"] == ["Ingress"]
    assert np["spec"]["podSelector"]["matchLabels"] == deployment(manifests(render(FULL)))["spec"]["selector"]["matchLabels"]
    rules = {r["ports"][0]["port"]: r for r in np["spec"]["ingress"]}
    assert rules["grpc"]["from"] == [{"namespaceSelector": {"matchLabels": {"loghaul-client": "true"}}}]
    assert rules["metrics"]["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    # The HTTP ingest port admits the gRPC port's peers unless networkPolicy.http.from says otherwise.
    assert rules[HTTP_PORT_NAME]["ports"] == [{"port": HTTP_PORT_NAME, "protocol": "TCP"}]
    assert rules[HTTP_PORT_NAME]["from"] == rules["grpc"]["from"], rules[HTTP_PORT_NAME]
    assert sorted(rules) == sorted(["grpc", HTTP_PORT_NAME, "metrics"]), sorted(rules)
    open_np = one(manifests(render({"networkPolicy": {"enabled": True}})), "NetworkPolicy")
    open_rules = {r["ports"][0]["port"]: r for r in open_np["spec"]["ingress"]}
    assert "from" not in open_rules["grpc"], "empty grpc.from means any source"
    assert "from" not in open_rules[HTTP_PORT_NAME], "http.from null follows grpc.from: any source"
    peers = [{"podSelector": {"matchLabels": {"app": "otel-collector"}}}]
    own = {r["ports"][0]["port"]: r for r in one(manifests(render(merged(FULL, {"networkPolicy": {"http": {"from": peers}}}))),
                                                "NetworkPolicy")["spec"]["ingress"]}
    assert own[HTTP_PORT_NAME]["from"] == peers and own["grpc"]["from"] == rules["grpc"]["from"]
    anyone = {r["ports"][0]["port"]: r for r in one(manifests(render(merged(FULL, {"networkPolicy": {"http": {"from": []}}}))),
                                                   "NetworkPolicy")["spec"]["ingress"]}
    assert "from" not in anyone[HTTP_PORT_NAME], "http.from [] means any source, even with grpc.from set"
    assert anyone["grpc"]["from"] == rules["grpc"]["from"]


def http_port_everywhere(docs: list[dict]) -> dict[str, list]:
    """Where the HTTP ingest port shows up: by name or by number, in each kind that lists ports."""
    found: dict[str, list] = {}
    ctr_ports = container(docs)["ports"]
    found["Deployment"] = [p for p in ctr_ports if p["name"] == HTTP_PORT_NAME or p["containerPort"] == 4318]
    for svc in of_kind(docs, "Service"):
        found[f"Service/{svc['metadata']['name']}"] = [
            p for p in svc["spec"]["ports"] if p["name"] == HTTP_PORT_NAME or p["port"] == 4318]
    for np in of_kind(docs, "NetworkPolicy"):
        found["NetworkPolicy"] = [p for r in np["spec"]["ingress"] for p in r.get("ports", [])
                                  if p["port"] in (HTTP_PORT_NAME, 4318)]
    return found


@check
def http_ingest_listener_is_on_by_default():
    values = {"networkPolicy": {"enabled": True}, "service": {"headless": {"enabled": True}}}
    rendered = render(values)
    docs = manifests(rendered)
    assert config_toml(docs)["http-listen"] == "0.0.0.0:4318"
    assert "http-cors-origins" not in config_toml(docs), "CORS is off by default"
    found = http_port_everywhere(docs)
    assert found["Deployment"] == [{"name": HTTP_PORT_NAME, "containerPort": 4318, "protocol": "TCP"}], found
    assert found[f"Service/{FULLNAME}"] == [
        {"name": HTTP_PORT_NAME, "port": 4318, "targetPort": HTTP_PORT_NAME, "protocol": "TCP", "appProtocol": "http"}]
    assert found["NetworkPolicy"] == [{"port": HTTP_PORT_NAME, "protocol": "TCP"}], found
    assert found[f"Service/{FULLNAME}-headless"] == [], "the headless Service stays gRPC-only"
    notes = rendered["loghaul/templates/NOTES.txt"]
    assert f"http://{FULLNAME}.{NAMESPACE}.svc:4318/v1/logs" in notes, notes
    assert f"http://{FULLNAME}.{NAMESPACE}.svc:4318/loki/api/v1/push" in notes, notes
    assert f"port-forward svc/{FULLNAME} 4318:{HTTP_PORT_NAME}" in notes
    assert "Authorization: Bearer" in notes
    # the probes stay on the metrics port
    assert container(docs)["readinessProbe"]["httpGet"]["port"] == "metrics"
    # ports and bind address follow the values
    docs2 = manifests(render({"config": {"bindAddress": "[::]"}, "containerPorts": {"http": 14318}}))
    assert config_toml(docs2)["http-listen"] == "[::]:14318"
    assert http_port_everywhere(docs2)["Deployment"] == [{"name": HTTP_PORT_NAME, "containerPort": 14318, "protocol": "TCP"}]
    svc_port = http_port_everywhere(docs2)[f"Service/{FULLNAME}"]
    assert [(p["port"], p["targetPort"]) for p in svc_port] == [(4318, HTTP_PORT_NAME)], svc_port


@check
def http_ingest_off_switch_removes_the_port():
    # (the Grafana data source needs the port: grafana_datasource_url_follows_tls_or_override)
    values = merged(FULL, {"config": {"httpListenEnabled": False}, "grafanaDatasource": {"enabled": False}})
    rendered = render(values)
    docs = manifests(rendered)
    cfg = config_toml(docs)
    assert cfg["http-listen"] == "off", cfg.get("http-listen")
    assert "http-cors-origins" not in cfg
    found = http_port_everywhere(docs)
    assert set(found) == {"Deployment", f"Service/{FULLNAME}", f"Service/{FULLNAME}-headless", "NetworkPolicy"}, found
    assert all(v == [] for v in found.values()), f"the HTTP ingest port is still rendered: {found}"
    assert {p["name"] for p in container(docs)["ports"]} == {"grpc", "metrics"}
    assert {p["name"] for p in one(docs, "Service", FULLNAME)["spec"]["ports"]} == {"grpc", "metrics"}
    np_ports = [r["ports"][0]["port"] for r in one(docs, "NetworkPolicy")["spec"]["ingress"]]
    assert np_ports == ["grpc", "metrics"], np_ports
    text = "\n".join(body for path, body in rendered.items() if not path.endswith("NOTES.txt"))
    assert HTTP_PORT_NAME not in text and not re.search(r"\b4318\b", text), "no trace of the HTTP port when it is off"
    notes = rendered["loghaul/templates/NOTES.txt"]
    assert "/v1/logs" not in notes and "/loki/api/v1/push" not in notes, notes
    assert "httpListenEnabled=false" in notes
    # the toggle rolls the pods (the config changes)
    assert pod_annotations(docs)["checksum/config"] != pod_annotations(manifests(render(FULL)))["checksum/config"]
    # the rest of the config is untouched
    on = config_toml(manifests(render(FULL)))
    assert {k: v for k, v in cfg.items() if k != "http-listen"} == {k: v for k, v in on.items() if k != "http-listen"}


@check
def http_cors_origins_render():
    assert "http-cors-origins" not in config_toml(manifests(render({"config": {"httpCorsOrigins": ""}})))
    for given, expected in [
        ("https://app.example.com", "https://app.example.com"),
        ("*", "*"),
        ("https://app.example.com,http://localhost:3000", "https://app.example.com,http://localhost:3000"),
        (" https://a.example.com , https://b.example.com:8443 ", "https://a.example.com,https://b.example.com:8443"),
        (["https://a.example.com", "https://b.example.com"], "https://a.example.com,https://b.example.com"),
        ([], None),
    ]:
        rendered = render({"config": {"httpCorsOrigins": given}})
        cfg = config_toml(manifests(rendered))
        assert cfg.get("http-cors-origins") == expected, (given, cfg.get("http-cors-origins"))
        assert cfg["http-listen"] == "0.0.0.0:4318"
        notes = rendered["loghaul/templates/NOTES.txt"]
        assert (f"(CORS): {expected}" in notes) if expected else ("CORS" not in notes), (given, notes)
    expect_render_failure({"config": {"httpListenEnabled": False, "httpCorsOrigins": "https://app.example.com"}},
                          "httpCorsOrigins", "httpListenEnabled")
    expect_schema_rejects({"config": {"httpCorsOrigins": "app.example.com"}}, "httpCorsOrigins")
    expect_schema_rejects({"config": {"httpCorsOrigins": "https://app.example.com/path"}}, "httpCorsOrigins")
    expect_schema_rejects({"config": {"httpCorsOrigins": ["https://a.example.com", "b"]}}, "httpCorsOrigins")
    expect_schema_rejects({"config": {"httpCorsOrigins": "ftp://files.example.com"}}, "httpCorsOrigins")
    expect_schema_rejects({"config": {"httpCorsOrigins": "https://app.example.com?x=1"}}, "httpCorsOrigins")
    expect_schema_rejects({"config": {"httpCorsOrigins": 42}}, "httpCorsOrigins")


@check
def grafana_dashboard():
    cm = one(manifests(render(FULL)), "ConfigMap", f"{FULLNAME}-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"]["grafana_folder"] == "Logging"
    dash = json.loads(cm["data"]["loghaul.json"])
    exprs = {}
    for panel in dash["panels"]:
        if panel["type"] == "row":
            continue
        exprs[panel["title"]] = " ".join(t["expr"] for t in panel["targets"])
    joined = " ".join(exprs.values())
    for needle in [
        "loghaul_queue_depth", "loghaul_queue_capacity",
        "rate(loghaul_records_received_total", "rate(loghaul_records_committed_total",
        "loghaul_records_rejected_total", "by (reason)",
        "loghaul_batch_rows_bucket", "loghaul_flush_duration_seconds_bucket",
        "loghaul_backpressure_wait_seconds_bucket", "loghaul_backpressure_timeouts_total",
        "loghaul_active_streams", "loghaul_buffered_bytes", "loghaul_buffered_bytes_limit",
    ]:
        assert needle in joined, f"dashboard lacks {needle}"
    assert re.search(r"rate\(loghaul_records_received_total\{[^}]*\}\[1m\]\)", exprs["Records/s received vs committed"])
    assert exprs["Batch size (rows)"].count("histogram_quantile") == 2
    assert "histogram_quantile(0.5" in exprs["Flush latency"] and "histogram_quantile(0.99" in exprs["Flush latency"]
    assert "shard" in json.dumps([p for p in dash["panels"] if p["title"].startswith("Queue depth")])
    assert not of_kind(manifests(render()), "ConfigMap")[1:], "no dashboard by default"


def datasource_labelled(docs: list[dict]) -> list[dict]:
    """Every rendered resource the Grafana sidecar would load as a data source (its default label)."""
    return [d for d in docs if d["metadata"].get("labels", {}).get("grafana_datasource") == "1"]


def datasource_file(doc: dict, key: str = DATASOURCE_FILE) -> dict:
    """The provisioning file in the data source ConfigMap or Secret, parsed."""
    assert list(doc["data"]) == [key], list(doc["data"])
    text = secret_data(doc)[key] if doc["kind"] == "Secret" else doc["data"][key]
    parsed = yaml.safe_load(text)
    assert parsed["apiVersion"] == 1, parsed
    assert len(parsed["datasources"]) == 1, parsed
    return parsed["datasources"][0]


def grafana_expands(value: str, env: dict[str, str]) -> str:
    """What Grafana makes of a provisioning value: "$$" is a literal "$"; ${NAME} and $NAME are environment lookups."""
    def expand(part: str) -> str:
        return re.sub(r"\$(?:\{(\w+)\}|(\w+))", lambda m: env.get(m.group(1) or m.group(2), ""), part)
    return "$".join(expand(part) for part in value.split("$$"))


@check
def grafana_datasource_is_off_by_default():
    for values in ({}, EXISTING_SECRETS, {"dashboards": {"enabled": True}}):
        docs = manifests(render(values))
        assert not datasource_labelled(docs), values
        assert not [d for d in docs if d["metadata"]["name"] == DATASOURCE], values


@check
def grafana_datasource_configmap_references_the_key():
    rendered = render({"grafanaDatasource": {"enabled": True}})
    docs = manifests(rendered)
    labelled = datasource_labelled(docs)
    assert [(d["kind"], d["metadata"]["name"]) for d in labelled] == [("ConfigMap", DATASOURCE)], labelled
    cm = labelled[0]
    assert cm["metadata"]["namespace"] == NAMESPACE
    assert cm["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert "annotations" not in cm["metadata"]
    ds = datasource_file(cm)
    assert ds == {
        "name": "loghaul",
        "type": "loki",
        "access": "proxy",
        # the chart's Service, HTTP ingest port (Grafana appends /loki/api/v1/...)
        "url": f"http://{FULLNAME}.{NAMESPACE}.svc:4318",
        "isDefault": False,
        "jsonData": {"maxLines": 1000, "timeout": 60, "httpHeaderName1": "X-API-Key"},
        "secureJsonData": {"httpHeaderValue1": "${LOGHAUL_API_KEY}"},
    }, ds
    assert grafana_expands(ds["secureJsonData"]["httpHeaderValue1"], {"LOGHAUL_API_KEY": "k3y"}) == "k3y"
    # The port is the Service's otlp-http port, not the container's.
    svc_ports = {p["name"]: p["port"] for p in one(docs, "Service", FULLNAME)["spec"]["ports"]}
    assert ds["url"].endswith(f":{svc_ports[HTTP_PORT_NAME]}")
    # No key in any ConfigMap: neither the generated one nor explicit ones.
    generated = secret_data(one(docs, "Secret", KEYS_SECRET))["api-key"]
    for values, keys in [({}, [generated]), ({"apiKeys": {"team-a-k3y-1234": "tenant_a"}}, ["team-a-k3y-1234"])]:
        docs_k = docs if not values else manifests(render(merged(values, {"grafanaDatasource": {"enabled": True}})))
        for doc in of_kind(docs_k, "ConfigMap"):
            text = json.dumps(doc)
            assert not [k for k in keys if k in text], f"{doc['metadata']['name']} carries an API key"
        assert not [d for d in of_kind(docs_k, "Secret") if d["metadata"]["name"] == DATASOURCE]
    # Every knob reaches the file.
    custom = {"grafanaDatasource": {
        "enabled": True, "name": "loghaul (prod)", "isDefault": True, "maxLines": 5000, "timeout": 120,
        "namespace": "monitoring", "labels": {"grafana_datasource": "1", "team": "logging"},
        "annotations": {"grafana_folder": "Logging"}, "apiKey": {"envVar": "GF_LOGHAUL_KEY"}},
        "service": {"ports": {"http": 8080}}, "containerPorts": {"http": 5318}}
    cm2 = one(manifests(render(custom)), "ConfigMap", DATASOURCE)
    assert cm2["metadata"]["namespace"] == "monitoring"
    assert cm2["metadata"]["labels"]["team"] == "logging" and cm2["metadata"]["labels"]["grafana_datasource"] == "1"
    assert cm2["metadata"]["annotations"] == {"grafana_folder": "Logging"}
    ds2 = datasource_file(cm2)
    assert ds2["name"] == "loghaul (prod)" and ds2["isDefault"] is True
    assert ds2["jsonData"] == {"maxLines": 5000, "timeout": 120, "httpHeaderName1": "X-API-Key"}, ds2["jsonData"]
    assert ds2["secureJsonData"] == {"httpHeaderValue1": "${GF_LOGHAUL_KEY}"}
    # the URL names the release's namespace, wherever the ConfigMap goes
    assert ds2["url"] == f"http://{FULLNAME}.{NAMESPACE}.svc:8080", ds2["url"]
    # a renamed release
    other = chart().render({"grafanaDatasource": {"enabled": True}}, name="edge", namespace="ops", is_install=True)
    ds3 = datasource_file(one(manifests(other), "ConfigMap", "edge-loghaul-datasource"), "edge-loghaul-datasource.yaml")
    assert ds3["url"] == "http://edge-loghaul.ops.svc:4318", ds3["url"]


@check
def grafana_datasource_with_key_value_is_a_secret():
    key = "graf-k3y_7.x"
    values = {"apiKeys": {key: "tenant_a", "other": "tenant_b"}, "grafanaDatasource": {"enabled": True, "apiKey": {"value": key}}}
    rendered = render(values)
    docs = manifests(rendered)
    labelled = datasource_labelled(docs)
    assert [(d["kind"], d["metadata"]["name"]) for d in labelled] == [("Secret", DATASOURCE)], labelled
    secret = labelled[0]
    assert secret["type"] == "Opaque" and secret["metadata"]["namespace"] == NAMESPACE
    ds = datasource_file(secret)
    assert ds["type"] == "loki" and ds["url"] == f"http://{FULLNAME}.{NAMESPACE}.svc:4318"
    assert ds["jsonData"]["httpHeaderName1"] == "X-API-Key"
    assert ds["secureJsonData"] == {"httpHeaderValue1": key}, ds["secureJsonData"]
    # The key is in no ConfigMap, and nowhere in plain text outside the Secrets' base64.
    assert not [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"] == DATASOURCE]
    for path, body in rendered.items():
        assert key not in body, f"{path} shows the key in plain text"
    # Keys are literal: Grafana's $ expansion and YAML quoting must not change them.
    for odd in ['k$y"with: quotes', "$LOGHAUL_API_KEY", "ends-with$", "a$$b", "#hash and 'single'"]:
        s = one(manifests(render({"grafanaDatasource": {"enabled": True, "apiKey": {"value": odd}}})), "Secret", DATASOURCE)
        header = datasource_file(s)["secureJsonData"]["httpHeaderValue1"]
        assert grafana_expands(header, {"LOGHAUL_API_KEY": "wrong", "y": "wrong"}) == odd, (odd, header)
    # A key this release does not accept would make every query fail.
    expect_render_failure({"apiKeys": {"k1": "t"}, "grafanaDatasource": {"enabled": True, "apiKey": {"value": "nope"}}},
                          "grafanaDatasource.apiKey.value", "apiKeys")
    # ...unless Grafana queries some other loghaul.
    elsewhere = {"apiKeys": {"k1": "t"}, "grafanaDatasource": {"enabled": True, "url": "https://logs.example.com",
                                                              "apiKey": {"value": "remote-key"}}}
    assert datasource_file(one(manifests(render(elsewhere)), "Secret", DATASOURCE))["url"] == "https://logs.example.com"


@check
def grafana_datasource_url_follows_tls_or_override():
    tls = {"tls": {"enabled": True, "secretName": "loghaul-tls"}, "grafanaDatasource": {"enabled": True}}
    ds = datasource_file(one(manifests(render(tls)), "ConfigMap", DATASOURCE))
    assert ds["url"] == f"https://{FULLNAME}.{NAMESPACE}.svc:4318", f"tls.enabled must make it https: {ds['url']}"
    full = datasource_file(one(manifests(render(FULL)), "ConfigMap", DATASOURCE))
    assert full["url"] == f"https://{FULLNAME}.{NAMESPACE}.svc:4318", full["url"]
    for url in ["https://loghaul.example.com", "http://loghaul-gateway.logging:3100/loghaul", "http://${LOGHAUL_HOST}:4318"]:
        ds = datasource_file(one(manifests(render(merged(tls, {"grafanaDatasource": {"url": url}}))), "ConfigMap", DATASOURCE))
        assert ds["url"] == url, (url, ds["url"])
    # Without the HTTP listener there is nothing in-cluster to query, unless the URL points elsewhere.
    off = {"config": {"httpListenEnabled": False}, "grafanaDatasource": {"enabled": True}}
    expect_render_failure(off, "grafanaDatasource", "httpListenEnabled")
    ds = datasource_file(one(manifests(render(merged(off, {"grafanaDatasource": {"url": "https://logs.example.com"}}))),
                             "ConfigMap", DATASOURCE))
    assert ds["url"] == "https://logs.example.com"
    # NOTES say where the data source is and how Grafana gets the key.
    notes = render(tls)["loghaul/templates/NOTES.txt"]
    assert f"https://{FULLNAME}.{NAMESPACE}.svc:4318" in notes and "LOGHAUL_API_KEY" in notes and DATASOURCE in notes, notes
    assert "LOGHAUL_API_KEY" not in render()["loghaul/templates/NOTES.txt"]


@check
def grafana_datasource_schema_is_strict():
    chart().validate_schema({"grafanaDatasource": {"enabled": True, "url": "https://a.example.com/x", "apiKey": {"value": "k"}}})
    expect_schema_rejects({"grafanaDatasource": {"enabled": True, "uri": "http://x"}}, "uri")
    expect_schema_rejects({"grafanaDatasource": {"apiKey": {"secret": "k"}}}, "secret")
    expect_schema_rejects({"grafanaDatasource": {"enabled": "yes"}}, "enabled")
    expect_schema_rejects({"grafanaDatasource": {"isDefault": "true"}}, "isDefault")
    expect_schema_rejects({"grafanaDatasource": {"maxLines": "1000"}}, "maxLines")
    expect_schema_rejects({"grafanaDatasource": {"maxLines": 0}}, "maxLines")
    expect_schema_rejects({"grafanaDatasource": {"timeout": "60s"}}, "timeout")
    expect_schema_rejects({"grafanaDatasource": {"timeout": 0}}, "timeout")
    expect_schema_rejects({"grafanaDatasource": {"name": ""}}, "name")
    expect_schema_rejects({"grafanaDatasource": {"url": "loghaul.logs.svc:4318"}}, "url")
    expect_schema_rejects({"grafanaDatasource": {"url": "http://loghaul:4318/?x=1"}}, "url")
    expect_schema_rejects({"grafanaDatasource": {"apiKey": {"envVar": "LOGHAUL-KEY"}}}, "envVar")
    expect_schema_rejects({"grafanaDatasource": {"apiKey": {"envVar": ""}}}, "envVar")
    expect_schema_rejects({"grafanaDatasource": {"apiKey": {"value": 12345}}}, "value")
    expect_schema_rejects({"grafanaDatasource": {"labels": {"grafana_datasource": 1}}}, "labels")


@check
def migration_hook_job_for_postgres():
    docs = manifests(render({"database": {"url": POSTGRES_URL}}))
    job = one(docs, "Job", f"{FULLNAME}-migrate")
    ann = job["metadata"]["annotations"]
    assert ann["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert ann["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    spec = job["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never"
    assert "serviceAccountName" not in spec, "the chart's ServiceAccount does not exist yet when pre-install hooks run"
    ctr = spec["containers"][0]
    assert ctr["args"] == ["migrate"] and ctr["image"] == container(docs)["image"]
    ref = env_of(ctr)["LOGHAUL_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    # The Job must not read the chart's main Secret: it does not exist yet on a first install.
    hook_secret = one(docs, "Secret", ref["name"])
    assert ref["name"] != FULLNAME
    hann = hook_secret["metadata"]["annotations"]
    assert hann["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(hann["helm.sh/hook-weight"]) < int(ann.get("helm.sh/hook-weight", "0")), "the Secret must be created before the Job"
    assert "before-hook-creation" in hann["helm.sh/hook-delete-policy"]
    assert secret_data(hook_secret)[ref["key"]] == POSTGRES_URL
    main = one(docs, "Secret", FULLNAME)
    assert "helm.sh/hook" not in main["metadata"].get("annotations", {}), "main Secret stays a release resource"
    assert secret_data(main)["database-url"] == POSTGRES_URL
    env = env_of(container(docs))
    assert env["LOGHAUL_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": FULLNAME, "key": "database-url"}
    # The Job's pod is not one of the server pods (Service, PDB and NetworkPolicy select those).
    selector = deployment(docs)["spec"]["selector"]["matchLabels"]
    job_labels = job["spec"]["template"]["metadata"]["labels"]
    assert not all(job_labels.get(k) == v for k, v in selector.items())
    # with an existing Secret the Job reads it directly and no hook Secret is made
    docs2 = manifests(render(EXISTING_SECRETS))
    job2 = one(docs2, "Job", f"{FULLNAME}-migrate")
    ref2 = env_of(job2["spec"]["template"]["spec"]["containers"][0])["LOGHAUL_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref2 == {"name": "db-credentials", "key": "url"}
    assert not of_kind(docs2, "Secret")
    # and it can be switched off
    assert not of_kind(manifests(render({"database": {"url": POSTGRES_URL}, "migrations": {"enabled": False}})), "Job")


@check
def postgres_mode_switch():
    docs = manifests(render({"database": {"url": POSTGRES_URL}, "replicaCount": 3}))
    dep = deployment(docs)
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["strategy"]["type"] == "RollingUpdate"
    assert not of_kind(docs, "PersistentVolumeClaim"), "persistence is SQLite-only"
    assert "data" not in {m["name"] for m in container(docs)["volumeMounts"]}
    docs2 = manifests(render({"database": {"url": "postgresql://u@h/db"}, "persistence": {"enabled": False}, "replicaCount": 2}))
    assert deployment(docs2)["spec"]["replicas"] == 2


@check
def existing_secrets_are_referenced_not_created():
    docs = manifests(render(EXISTING_SECRETS))
    assert not of_kind(docs, "Secret"), "no chart Secret when both secrets exist"
    env = env_of(container(docs))
    assert env["LOGHAUL_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "db-credentials", "key": "url"}
    assert keys_volume(docs)["secret"] == {"secretName": "ingest-keys", "items": [{"key": "keys", "path": "keys.toml"}]}
    ann = pod_annotations(docs)
    assert "checksum/config" in ann and "checksum/secret" not in ann
    assert not of_kind(docs, "PersistentVolumeClaim"), "an existing secret means PostgreSQL"
    # default key names
    docs2 = manifests(render({"database": {"existingSecret": "db"}, "apiKeysExistingSecret": "keys"}))
    env2 = env_of(container(docs2))
    assert env2["LOGHAUL_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "db", "key": "database-url"}
    assert keys_volume(docs2)["secret"]["items"] == [{"key": "keys.toml", "path": "keys.toml"}]
    # only the database secret exists: the chart still creates the one for the API keys
    docs3 = manifests(render({"database": {"existingSecret": "db"}, "apiKeys": {"k1": "t1"}}))
    assert [d["metadata"]["name"] for d in of_kind(docs3, "Secret")] == [KEYS_SECRET]
    assert keys_file(docs3) == {"keys": {"k1": "t1"}}
    assert "checksum/secret" not in pod_annotations(docs3), "the keys Secret is reloaded, not rolled"


@check
def no_keys_given_means_a_generated_key_not_an_open_service():
    rendered = render()
    docs = manifests(rendered)
    secret = one(docs, "Secret", KEYS_SECRET)
    data = secret_data(secret)
    key = data["api-key"]
    assert re.fullmatch(r"[A-Za-z0-9]{40}", key), "a random key of 40 letters and digits"
    assert keys_file(docs) == {"keys": {key: "default"}}, "the generated key is tenant default, as keyless was"
    assert key not in rendered["loghaul/templates/NOTES.txt"], "NOTES say how to read the key, never the key"
    # Offline `lookup` finds nothing, so every render draws a new key; against a cluster the
    # template reuses the one in the Secret, so upgrades keep it.
    assert secret_data(one(manifests(render()), "Secret", KEYS_SECRET))["api-key"] != key
    template = (CHART_DIR / "templates" / "api-keys-secret.yaml").read_text()
    assert f'lookup "v1" "Secret" .Release.Namespace $name' in template and "randAlphaNum" in template
    ctr = container(docs)
    assert ctr["args"][-2:] == ["--api-keys-file", KEYS_FILE], ctr["args"]
    assert keys_volume(docs)["secret"] == {"secretName": KEYS_SECRET, "items": [{"key": "keys.toml", "path": "keys.toml"}]}
    mounts = [m for m in ctr["volumeMounts"] if m["name"] == "api-keys"]
    # A subPath mount would never see a Secret update, so the reload could not happen.
    assert mounts == [{"name": "api-keys", "mountPath": "/etc/loghaul-keys", "readOnly": True}], mounts
    notes = rendered["loghaul/templates/NOTES.txt"]
    read_key = f"kubectl -n {NAMESPACE} get secret {KEYS_SECRET} -o jsonpath='{{.data.api-key}}' | base64 -d"
    assert read_key in notes, notes
    assert "reload" in notes and "x-api-key" in notes


@check
def explicit_api_keys_are_a_mounted_keys_file():
    docs = manifests(render(FULL))
    assert keys_file(docs) == {"keys": {"key-a": "tenant_a", "key-b": "tenant_b"}}
    assert "api-key" not in secret_data(one(docs, "Secret", KEYS_SECRET)), "nothing was generated"
    assert "LOGHAUL_API_KEYS" not in env_of(container(docs))
    assert container(docs)["args"][-2:] == ["--api-keys-file", KEYS_FILE]
    notes = render(FULL)["loghaul/templates/NOTES.txt"]
    assert "generated" not in notes and KEYS_SECRET in notes
    # Keys are TOML strings, whatever they hold.
    odd = {'k,=1"\\ x<': "team-a"}
    assert keys_file(manifests(render({"apiKeys": odd}))) == {"keys": odd}
    expect_render_failure({"apiKeys": {"k": "t"}, "apiKeysExistingSecret": "s"}, "apiKeysExistingSecret")
    expect_schema_rejects({"apiKeys": {"k": "bad tenant"}}, "apiKeys")


@check
def no_render_runs_without_keys():
    scenarios = [{}, FULL, EXISTING_SECRETS, {"database": {"url": POSTGRES_URL}, "replicaCount": 3},
                 {"apiKeys": {"k": "t"}}, {"apiKeysExistingSecret": "mine"}, {"config": {"consoleListen": "off"}}]
    for values in scenarios:
        rendered = render(values)
        text = "\n".join(body for path, body in rendered.items() if not path.endswith("NOTES.txt"))
        assert "allow-unauthenticated" not in text.lower() and "ALLOW_UNAUTHENTICATED" not in text, values
        docs = manifests(rendered)
        assert container(docs)["args"][-2:] == ["--api-keys-file", KEYS_FILE], values
        assert "api-keys-file" not in config_toml(docs) and "allow-unauthenticated" not in config_toml(docs)
        secret_name = keys_volume(docs)["secret"]["secretName"]
        if not values.get("apiKeysExistingSecret"):
            assert keys_file(docs)["keys"], f"{values}: the mounted keys file has keys"
            assert secret_name == KEYS_SECRET
        else:
            assert secret_name == values["apiKeysExistingSecret"]


@check
def sqlite_guards_fail_clearly():
    expect_render_failure({"replicaCount": 3}, "SQLite", "replicaCount is 3", "PostgreSQL")
    expect_render_failure({"database": {"url": "sqlite:///data/x.db"}, "replicaCount": 2}, "SQLite", "replica")
    expect_render_failure({"autoscaling": {"enabled": True}}, "autoscaling is not possible in SQLite mode")
    expect_render_failure({"persistence": {"enabled": False}}, "SQLite mode needs persistence.enabled=true")
    expect_render_failure({"database": {"url": "sqlite:///var/lib/loghaul.db"}}, "persistence.mountPath")
    expect_render_failure({"database": {"url": POSTGRES_URL, "existingSecret": "x"}}, "not both")
    # what does work in SQLite mode
    docs = manifests(render({"replicaCount": 0}))
    assert deployment(docs)["spec"]["replicas"] == 0
    docs = manifests(render({"persistence": {"existingClaim": "old-data", "mountPath": "/var/lib/loghaul"}}))
    assert not of_kind(docs, "PersistentVolumeClaim")
    vol = [v for v in deployment(docs)["spec"]["template"]["spec"]["volumes"] if v["name"] == "data"][0]
    assert vol["persistentVolumeClaim"]["claimName"] == "old-data"
    assert secret_data(one(docs, "Secret", FULLNAME))["database-url"] == "sqlite:///var/lib/loghaul/loghaul.db"


@check
def manifests_pass_kubernetes_validate_strict():
    scenarios = {
        "defaults": {},
        "all features": FULL,
        "existing secrets": EXISTING_SECRETS,
        "postgres": {"database": {"url": POSTGRES_URL}, "replicaCount": 3},
        "sqlite existing claim + storage class": {"persistence": {"existingClaim": "c", "storageClass": "fast"}},
        "sqlite storage class": {"persistence": {"storageClass": "-"}, "preStopSleepSeconds": 3},
        "hard anti-affinity + min pdb": {"podAntiAffinityPreset": "hard", "podDisruptionBudget": {"minAvailable": 1}},
        "http ingest off": merged(FULL, {"config": {"httpListenEnabled": False}, "grafanaDatasource": {"enabled": False}}),
        "http ingest own peers + cors": merged(FULL, {"networkPolicy": {"http": {"from": [{"podSelector": {}}]}},
                                                      "config": {"httpCorsOrigins": "*"}}),
        "grafana data source as a Secret": merged(FULL, {"grafanaDatasource": {
            "apiKey": {"value": "key-a"}, "namespace": "monitoring", "annotations": {"grafana_folder": "Logging"}}}),
    }
    validated = 0
    skipped: set[str] = set()
    for label, values in scenarios.items():
        for doc in manifests(render(values)):
            doc = {k: v for k, v in doc.items() if k != "__source__"}
            assert doc["metadata"]["namespace"], (label, doc["kind"])
            if doc["kind"] in CRD_KINDS:
                skipped.add(doc["kind"])
                continue
            try:
                kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
            except kubernetes_validate.ValidationError as err:
                raise AssertionError(f"{label}: {doc['kind']}/{doc['metadata']['name']}: {err.message} at {list(err.path)}")
            validated += 1
    assert skipped == CRD_KINDS, skipped
    assert validated >= 50, validated
    print(f"      validated {validated} manifests against Kubernetes {KUBE_VERSION} (strict); skipped CRD kinds: {', '.join(sorted(skipped))}")


# ---------------------------------------------------------------- runner


def main() -> int:
    print(f"helm SDK {helm.helm_sdk_version()}, kubernetes-validate {kubernetes_validate.__version__ if hasattr(kubernetes_validate, '__version__') else ''}".rstrip(", "))
    passed = failed = 0
    for fn in TESTS:
        started = time.monotonic()
        try:
            fn()
        except Exception as err:  # noqa: BLE001 - report every failure, keep going
            failed += 1
            print(f"FAIL  {fn.__name__} ({time.monotonic() - started:.1f}s)")
            if isinstance(err, AssertionError):
                print(f"      {err}")
            else:
                print("      " + traceback.format_exc().replace("\n", "\n      "))
        else:
            passed += 1
            print(f"ok    {fn.__name__} ({time.monotonic() - started:.1f}s)")
    if CHART is not None:
        CHART.close()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
