"""The Helm chart and deploy/k8s, validated offline (no cluster runs here, none is pretended).

Every object of every case of the values matrix (tests/k8s/chart.py): core kinds with
kubernetes-validate --strict (unknown fields fail) for the oldest supported Kubernetes (1.29,
native sidecars) and the one of kubectl here (1.32); Prometheus Operator kinds with the schema
validators of @kubernetes-models/prometheus-operator; LeaderWorkerSet against
schemas/leaderworkerset-v1.json with check-jsonschema, its pod templates as core PodTemplates;
the PrometheusRule's PromQL with promtool (check + the shipped unit tests); deploy/k8s with
``kubectl kustomize``. What a schema cannot say (probes, loopback, non-root, secrets by
reference, the labels the rules and Grafana select on) is asserted below.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="tests/k8s/requirements.txt not installed (scripts/test does)")
helm_python = pytest.importorskip(
    "helm_python", reason="helm-python-sdk missing (tests/k8s/requirements.txt)"
)
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate missing")

from k8s import chart  # noqa: E402  (tests/k8s/chart.py, also a script; tests/ is on the path)

# One worker for the module: `rendered` (every case of the matrix through Helm) is module-scoped,
# and every worker that ran one of these tests rendered them all again.
pytestmark = pytest.mark.xdist_group("k8s_chart")

HERE = Path(__file__).parent
REPO = chart.REPO
KUBE_VERSIONS = ("1.29.0", "1.32.0")
CORE_API = {"v1", "apps/v1", "networking.k8s.io/v1"}
OPERATOR_API = "monitoring.coreos.com/v1"
LWS_API = "leaderworkerset.x-k8s.io/v1"
PROMTOOL = shutil.which("promtool")
KUBECTL = shutil.which("kubectl")
NODE = shutil.which("node")
CHECK_JSONSCHEMA = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
OPERATOR_MODELS = HERE / "node_modules" / "@kubernetes-models" / "prometheus-operator"


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {case: chart.render(values) for case, values in chart.MATRIX.items()}


def _pods(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(where, pod spec) of every pod template."""
    out = []
    for o in objects:
        if o["kind"] == "Deployment":
            out.append((o["metadata"]["name"], o["spec"]["template"]["spec"]))
        elif o["kind"] == "LeaderWorkerSet":
            lwt = o["spec"]["leaderWorkerTemplate"]
            out.append(("leader", lwt["leaderTemplate"]["spec"]))
            out.append(("worker", lwt["workerTemplate"]["spec"]))
    return out


def _env(container: dict[str, Any], name: str) -> str | None:
    for env in container.get("env", []):
        if env["name"] == name:
            value: str | None = env.get("value")
            return value
    return None


def _container(spec: dict[str, Any], name: str) -> dict[str, Any] | None:
    for c in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        if c["name"] == name:
            return dict(c)
    return None


def test_generated_files_are_current() -> None:
    wrong = chart.stale()
    assert not wrong, f"stale: {[str(p.relative_to(REPO)) for p in wrong]}; run tests/k8s/chart.py --write"


def test_chart_lints_strict() -> None:
    for case, values in chart.MATRIX.items():
        report = helm_python.lint(str(chart.CHART), values, strict=True, kube_version="v1.29.0")
        problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
        assert not problems, (case, problems)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # values.schema.json: unknown keys (a typo) and wrong types fail, naming the key.
        ({"mode": "daemonset"}, "/mode': value must be one of"),
        ({"sidecar": {"workload": "StatefulSet"}}, "/sidecar/workload': value must be one of"),
        ({"podmonitor": {"enabled": True}}, "additional properties 'podmonitor' not allowed"),
        ({"podMonitor": {"enable": True}}, "additional properties 'enable' not allowed"),
        ({"sglang": {"service": {"typ": "LoadBalancer"}}}, "additional properties 'typ' not allowed"),
        ({"sidecar": {"replicas": "2"}}, "/sidecar/replicas': got string, want integer"),
        ({"exporter": {"port": 0}}, "/exporter/port'"),
        ({"networkPolicy": {"enabled": "yes"}}, "/networkPolicy/enabled': got string, want boolean"),
        ({"fleet": {"targets": [{"name": "Bad_Name", "url": "http://a:1"}]}}, "/fleet/targets/0/name'"),
        ({"mode": "fleet"}, "mode fleet needs fleet.targets"),
        ({"mode": "fleet", "fleet": {"targets": [{"name": "a", "url": "https://a:443"}]}}, "must be http://"),
        ({"exporter": {"basicAuth": True}}, "exporter.basicAuth needs existingSecret"),
        # Alert overrides: a misspelt alert or key, a threshold where none is marked, a bad `for`.
        (
            {"prometheusRule": {"enabled": True, "rules": {"GpuTempHigh": {"enabled": False}}}},
            "prometheusRule.rules.GpuTempHigh: no such alert",
        ),
        (
            {"prometheusRule": {"enabled": True, "rules": {"GpuMissing": {"threshold": 7}}}},
            "prometheusRule.rules.GpuMissing.threshold: its expression has no single `# threshold` marker",
        ),
        (
            {"prometheusRule": {"rules": {"GpuMissing": {"treshold": 7}}}},
            "additional properties 'treshold' not allowed",
        ),
        (
            {"prometheusRule": {"rules": {"GpuMissing": {"for": "5 min"}}}},
            "/prometheusRule/rules/GpuMissing/for'",
        ),
        ({"prometheusRule": {"runbookBaseUrl": "docs/runbooks/"}}, "/prometheusRule/runbookBaseUrl'"),
        ({"prometheusRule": {"dcgm": {"enabled": "yes"}}}, "/prometheusRule/dcgm/enabled': got string"),
    ],
)
def test_bad_values_fail_rendering_with_a_message(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm_python.HelmError, match=message):
        chart.render(values)


@pytest.mark.parametrize("case", list(chart.MATRIX))
def test_every_object_validates(case: str, rendered: dict[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    objects = rendered[case]
    operator, unknown = [], []
    for o in objects:
        api, kind, name = o["apiVersion"], o["kind"], o["metadata"]["name"]
        if api in CORE_API:
            for version in KUBE_VERSIONS:
                _validate_core(o, version, f"{case}: {kind}/{name}")
        elif api == OPERATOR_API:
            operator.append(o)
        elif api == LWS_API:
            _validate_lws(o, tmp_path, f"{case}: {kind}/{name}")
        else:
            unknown.append(f"{api} {kind}")
    assert not unknown, f"{case}: no validator for {unknown}"
    if operator:
        _validate_operator(operator, case)


def _validate_core(obj: dict[str, Any], version: str, where: str) -> None:
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        raise AssertionError(f"{where} (Kubernetes {version}): {str(exc).splitlines()[0]}") from None


def _validate_lws(obj: dict[str, Any], tmp_path: Path, where: str) -> None:
    if CHECK_JSONSCHEMA is None:
        pytest.skip("check-jsonschema missing (tests/k8s/requirements.txt)")
    doc = tmp_path / "lws.json"
    doc.write_text(json.dumps(obj), encoding="utf-8")
    schema = HERE / "schemas" / "leaderworkerset-v1.json"
    proc = subprocess.run(
        [CHECK_JSONSCHEMA, "--schemafile", str(schema), str(doc)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, f"{where}: {proc.stdout}{proc.stderr}"
    lwt = obj["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": role},
            "template": lwt[role],
        }
        for version in KUBE_VERSIONS:
            _validate_core(template, version, f"{where} {role}")


def _validate_operator(objects: list[dict[str, Any]], case: str) -> None:
    if NODE is None or not OPERATOR_MODELS.is_dir():
        pytest.skip("node or tests/k8s/node_modules missing (scripts/test runs npm ci)")
    proc = subprocess.run(
        [NODE, str(HERE / "validate_operator.mjs")],
        input=json.dumps(objects),
        capture_output=True,
        text=True,
        cwd=HERE,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(objects)
    bad = [r for r in results if r["errors"]]
    assert not bad, f"{case}: {bad}"


def test_the_validators_reject_what_they_should(tmp_path: Path) -> None:
    """Each validator fails on a broken object: a green run means something."""
    base = chart.render(chart.VARIANTS["lws"])
    lws = next(o for o in base if o["kind"] == "LeaderWorkerSet")
    deployment = next(o for o in chart.render({}) if o["kind"] == "Deployment")
    monitor = next(o for o in base if o["kind"] == "PodMonitor")
    typo = json.loads(json.dumps(deployment))
    typo["spec"]["template"]["spec"]["initContainers"][0]["restartPolicyy"] = "Always"
    with pytest.raises(AssertionError, match="restartPolicyy"):
        _validate_core(typo, "1.32.0", "typo")
    bad_lws = json.loads(json.dumps(lws))
    bad_lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    with pytest.raises(AssertionError, match="restartPolicy"):
        _validate_lws(bad_lws, tmp_path, "bad lws")
    bad_pod = json.loads(json.dumps(lws))
    bad_pod["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["imagePolicy"] = "x"
    with pytest.raises(AssertionError, match="imagePolicy"):
        _validate_lws(bad_pod, tmp_path, "bad pod")
    bad_monitor = json.loads(json.dumps(monitor))
    bad_monitor["spec"]["podMetricsEndpoints"][0]["scheme"] = "ftp"
    with pytest.raises(AssertionError, match="scheme"):
        _validate_operator([bad_monitor], "bad monitor")


@pytest.mark.parametrize("case", list(chart.MATRIX))
def test_pods_are_locked_down_and_probed(case: str, rendered: dict[str, list[dict[str, Any]]]) -> None:
    values = chart.MATRIX[case]
    objects = rendered[case]
    pods = _pods(objects)
    assert pods
    port = 9480
    for where, spec in pods:
        assert spec["automountServiceAccountToken"] is False, where
        sentinel = _container(spec, "sentinel")
        sglang = _container(spec, "sglang")
        if where == "worker":
            assert sentinel is None  # sentinel watches the group from the leader only
            continue
        assert sentinel is not None, where
        sc = sentinel["securityContext"]
        assert sc["runAsNonRoot"] is True
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert sentinel["resources"]["limits"]["memory"]
        assert sentinel["livenessProbe"]["httpGet"]["path"] == "/healthz"
        # Secrets only by reference, never a literal value in the manifests.
        for env in sentinel["env"]:
            if env["name"].endswith(("API_KEY", "PASSWORD")):
                assert "value" not in env
                assert env["valueFrom"]["secretKeyRef"]["name"] == values["existingSecret"]
        if sglang is None:  # fleet: sentinel on its own
            assert "restartPolicy" not in sentinel
            continue
        # A native sidecar: an init container that keeps running.
        assert sentinel in [dict(c) for c in spec["initContainers"]]
        assert sentinel["restartPolicy"] == "Always"
        # SGLang beyond loopback (the API Service reaches it), exactly once and after the user's
        # args (the last --host wins); sentinel on loopback.
        user_args = values.get("sglang", {}).get("args", chart.DEFAULTS["sglang"]["args"])
        assert sglang["args"][: len(user_args)] == user_args
        assert [a for a in sglang["args"] if a.startswith("--host")] == ["--host=0.0.0.0"]
        assert sglang["args"].index("--host=0.0.0.0") >= len(user_args)
        assert _env(sentinel, "SENTINEL_SERVER__HOST") == "127.0.0.1"
        assert "--enable-metrics" in sglang["args"]
        live, start, ready = sglang["livenessProbe"], sglang["startupProbe"], sglang["readinessProbe"]
        scheme = "https" if values.get("exporter", {}).get("tls") else "http"
        for probe, mode in ((live, "live"), (start, "ready"), (ready, "ready")):
            command = probe["exec"]["command"]
            assert command[:3] == ["python3", "/etc/sentinel-probe/probe.py", mode]
            assert command[3:6] == [scheme, str(port), "30000"]
            # The script's budget is the probe's timeout: it answers before the kubelet gives up.
            assert command[6] == str(probe["timeoutSeconds"])
            assert probe["timeoutSeconds"] >= 25  # SGLang's /health may take its 20 s
        mounts = {m["name"]: m for m in sglang["volumeMounts"]}
        assert mounts["sentinel-probe"]["mountPath"] == "/etc/sentinel-probe"
        assert start["periodSeconds"] * start["failureThreshold"] >= 3600  # an hour of model load
        assert sentinel["livenessProbe"]["httpGet"]["scheme"] == scheme.upper()
        for env in sglang.get("env", []):
            assert "value" not in env or not env["name"].endswith("API_KEY")
    for o in objects:
        if o["kind"] == "Secret":
            raise AssertionError("the chart must not create Secrets from values")


@pytest.mark.parametrize("case", list(chart.MATRIX))
def test_monitors_set_the_labels_the_rules_and_prometheus_select(
    case: str, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    values = chart.MATRIX[case]
    job = values.get("jobLabel", "sentinel")
    monitors = [o for o in rendered[case] if o["kind"] in ("PodMonitor", "ServiceMonitor")]
    fleet = values.get("mode") == "fleet"
    enabled = values.get("serviceMonitor" if fleet else "podMonitor", {}).get("enabled", False)
    if not enabled or (fleet and values["fleet"].get("fileSd")):
        assert not monitors
        return
    expected = len(values["fleet"]["targets"]) if fleet else 1
    assert len(monitors) == expected
    for m in monitors:
        assert m["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        endpoints = m["spec"].get("podMetricsEndpoints") or m["spec"]["endpoints"]
        relabel = {r["targetLabel"]: r for r in endpoints[0]["relabelings"]}
        assert relabel["job"]["replacement"] == job
        if fleet:
            assert (
                relabel["instance"]["replacement"]
                == m["spec"]["selector"]["matchLabels"]["sglang-sentinel/target"]
            )
        else:
            assert relabel["instance"]["sourceLabels"] == ["__meta_kubernetes_pod_name"]


def _rule_groups(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rules = [o for o in objects if o["kind"] == "PrometheusRule"]
    assert len(rules) == 1
    groups: list[dict[str, Any]] = rules[0]["spec"]["groups"]
    return groups


def _shipped(name: str) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load((REPO / "deploy" / name).read_text(encoding="utf-8"))[
        "groups"
    ]
    return groups


def _rules(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in _rule_groups(objects) for r in g["rules"]}


def test_prometheus_rule_is_deploy_alerts(rendered: dict[str, list[dict[str, Any]]]) -> None:
    shipped = _shipped("alerts.yml")
    assert _rule_groups(rendered["sidecar"]) == shipped
    # Another job name reaches the one selector that names it, and nothing else.
    renamed = json.dumps(shipped).replace('job=\\"sentinel\\"', 'job=\\"sglang-sentinel\\"')
    assert renamed != json.dumps(shipped)
    assert _rule_groups(rendered["fleet-file-sd"]) == json.loads(renamed)
    assert not [o for o in rendered["sidecar-no-operator"] if o["kind"] == "PrometheusRule"]
    # The dcgm-exporter rules are deploy/alerts-dcgm.yml's, after alerts.yml's, when asked for.
    both = chart.render({"prometheusRule": {"enabled": True, "dcgm": {"enabled": True}}})
    assert _rule_groups(both) == shipped + _shipped("alerts-dcgm.yml")


def test_rule_overrides_reach_the_rendered_rules(rendered: dict[str, list[dict[str, Any]]]) -> None:
    values = chart.MATRIX["sidecar-alerts"]["prometheusRule"]
    rules = _rules(rendered["sidecar-alerts"])
    plain = _rules(chart.render({"prometheusRule": {"enabled": True, "dcgm": {"enabled": True}}}))
    # Disabled alerts are absent; every other alert is there.
    assert set(plain) - set(rules) == {"LoadClientBound", "DcgmGpuPcieReplays"}
    # Thresholds: the marked number, and nothing else of the expression, changed.
    for name, old, new in (
        ("SglangQueueBacklog", "> 32  # threshold", "> 64  # threshold"),
        ("GpuTemperatureHigh", "> 87  # threshold", "> 90.5  # threshold"),
        ("DcgmGpuTemperatureHigh", "> 87  # threshold", "> 90.5  # threshold"),
    ):
        assert old in plain[name]["expr"]
        assert rules[name]["expr"] == plain[name]["expr"].replace(old, new), name
    # `for`, severity, labels and annotations.
    assert rules["SglangQueueBacklog"]["for"] == "10m"
    assert rules["SglangStartTooLong"]["for"] == "90m"
    assert "for" not in plain["GpuRowRemapFailure"]
    assert rules["GpuRowRemapFailure"]["for"] == "5m"
    assert rules["GpuTemperatureHigh"]["labels"] == {
        "severity": "critical",
        "component": "gpu",
        "pager": "hardware",
        "team": "llm-serving",
    }
    dashboard = "https://grafana.example.com/d/sentinel-overview"
    assert rules["SglangStartTooLong"]["annotations"]["dashboard"] == dashboard
    base = values["runbookBaseUrl"]
    for name, rule in rules.items():
        # additionalRuleLabels on every alert, never over its own severity (nor component/cause).
        assert rule["labels"]["team"] == "llm-serving", name
        if name != "GpuTemperatureHigh":
            assert rule["labels"] == {**plain[name]["labels"], "team": "llm-serving"}, name
        # The runbook of every alert under the configured base, the page's own name.
        assert rule["annotations"]["runbook_url"] == f"{base}{name}.md", name
        assert (REPO / "docs" / "runbooks" / f"{name}.md").is_file(), name
        untouched = {k: v for k, v in rule.items() if k not in ("labels", "annotations", "expr", "for")}
        assert untouched == {
            k: v for k, v in plain[name].items() if k not in ("labels", "annotations", "expr", "for")
        }


def test_the_runbook_base_takes_a_missing_slash() -> None:
    rules = _rules(
        chart.render({"prometheusRule": {"enabled": True, "runbookBaseUrl": "https://wiki.example.com/rb"}})
    )
    assert (
        rules["SentinelDown"]["annotations"]["runbook_url"] == "https://wiki.example.com/rb/SentinelDown.md"
    )


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing (Debian package prometheus)")
def test_overridden_rules_pass_promtool(rendered: dict[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    assert PROMTOOL is not None
    (tmp_path / "rules.yml").write_text(
        yaml.safe_dump({"groups": _rule_groups(rendered["sidecar-alerts"])}, sort_keys=False),
        encoding="utf-8",
    )
    check = subprocess.run(
        [PROMTOOL, "check", "rules", "--lint-fatal", "rules.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing (Debian package prometheus)")
def test_promtool_checks_the_extracted_rules(tmp_path: Path) -> None:
    """The chart's PrometheusRule (dcgm rules included), written out as rule files, passes promtool's
    lint. Its unit tests are deploy/'s: test_prometheus_rule_is_deploy_alerts proves the rendered
    groups equal deploy/'s files, which tests/deploy/test_deploy.py unit-tests as shipped."""
    assert PROMTOOL is not None
    groups = _rule_groups(chart.render({"prometheusRule": {"enabled": True, "dcgm": {"enabled": True}}}))
    for name in chart.ALERT_FILES:
        names = {g["name"] for g in _shipped(name)}
        mine = [g for g in groups if g["name"] in names]
        assert mine == _shipped(name), name
        (tmp_path / name).write_text(yaml.safe_dump({"groups": mine}, sort_keys=False), encoding="utf-8")
    check = subprocess.run(
        [PROMTOOL, "check", "rules", "--lint-fatal", *chart.ALERT_FILES],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_dashboards_are_grafana_sidecar_configmaps(rendered: dict[str, list[dict[str, Any]]]) -> None:
    boards = {p.name: p.read_text(encoding="utf-8") for p in (REPO / "grafana" / "dashboards").glob("*.json")}
    assert boards
    maps = [
        o
        for o in rendered["sidecar"]
        if o["kind"] == "ConfigMap" and "grafana_dashboard" in o["metadata"]["labels"]
    ]
    assert {o["metadata"]["labels"]["grafana_dashboard"] for o in maps} == {"1"}
    carried = {k: v for o in maps for k, v in o["data"].items()}
    # |- in the template drops the file's final newline; the JSON is the same document.
    assert {k: json.loads(v) for k, v in carried.items()} == {k: json.loads(v) for k, v in boards.items()}
    assert all(len(v.encode()) < 1_000_000 for v in carried.values())  # a ConfigMap holds 1 MiB


def test_fleet_file_sd_lists_every_target(rendered: dict[str, list[dict[str, Any]]]) -> None:
    sd = next(o for o in rendered["fleet-file-sd"] if o["metadata"]["name"].endswith("-file-sd"))
    entries = json.loads(sd["data"]["sentinel.json"])
    services = {o["metadata"]["name"] for o in rendered["fleet-file-sd"] if o["kind"] == "Service"}
    assert [e["labels"]["instance"] for e in entries] == ["glm5-a", "glm5-b"]
    assert entries[0]["labels"]["deployment"] == "glm5-a"
    assert {e["targets"][0].split(".")[0] for e in entries} == services


@pytest.mark.skipif(KUBECTL is None, reason="kubectl missing")
@pytest.mark.parametrize("variant", ["", "lws", "fleet"])
def test_kustomize_renders_deploy_k8s(variant: str) -> None:
    assert KUBECTL is not None
    path = chart.K8S / variant if variant else chart.K8S
    proc = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    objects = [o for o in yaml.safe_load_all(proc.stdout) if o]
    want = chart.render(chart.VARIANTS[variant or "sidecar"])
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in want
    )
    assert {o["metadata"].get("namespace") for o in objects} == {"sentinel"}
    assert not [o for o in objects if "helm.sh/chart" in o["metadata"].get("labels", {})]


def _sidecar_cases() -> list[str]:
    return [c for c, v in chart.MATRIX.items() if v.get("mode", "sidecar") == "sidecar"]


def _leader_template(objects: list[dict[str, Any]]) -> dict[str, Any]:
    for o in objects:
        if o["kind"] == "Deployment":
            template: dict[str, Any] = o["spec"]["template"]
            return template
        if o["kind"] == "LeaderWorkerSet":
            template = o["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
            return template
    raise AssertionError("no SGLang workload")


@pytest.mark.parametrize("case", _sidecar_cases())
def test_the_api_service_selects_the_sglang_pod(case: str, rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered[case]
    services = [o for o in objects if o["kind"] == "Service"]
    assert len(services) == 1, case
    svc = services[0]
    leader = _leader_template(objects)
    labels = leader["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    sglang = _container(leader["spec"], "sglang")
    assert sglang is not None
    named = {p["name"]: p["containerPort"] for p in sglang["ports"]}
    (port,) = svc["spec"]["ports"]
    assert named[port["targetPort"]] == 30000
    want = chart.MATRIX[case].get("sglang", {}).get("service", {})
    assert svc["spec"]["type"] == want.get("type", "ClusterIP")
    assert svc["metadata"].get("annotations", {}) == want.get("annotations", {})
    for o in objects:
        if o["kind"] == "LeaderWorkerSet":
            # Workers run no HTTP server: the Service must not select them.
            worker = o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
            assert not svc["spec"]["selector"].items() <= worker.items()


def test_the_api_service_can_be_turned_off() -> None:
    objects = chart.render({"sglang": {"service": {"enabled": False}}})
    assert not [o for o in objects if o["kind"] == "Service"]
    assert not [o for o in chart.render(chart.MATRIX["fleet"]) if o["metadata"]["name"].endswith("-sglang")]


@pytest.mark.parametrize("case", _sidecar_cases())
def test_gpu_pods_roll_out_without_surge_and_stop_gracefully(
    case: str, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    for o in rendered[case]:
        if o["kind"] == "Deployment":
            assert o["spec"]["strategy"] == {"type": "Recreate"}
            specs = [o["spec"]["template"]["spec"]]
        elif o["kind"] == "LeaderWorkerSet":
            rollout = o["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]
            assert rollout["maxSurge"] == 0
            lwt = o["spec"]["leaderWorkerTemplate"]
            specs = [lwt["leaderTemplate"]["spec"], lwt["workerTemplate"]["spec"]]
        else:
            continue
        for spec in specs:
            # SGLang drains without a limit of its own: minutes, not the default 30 s.
            assert spec["terminationGracePeriodSeconds"] >= 300


def test_pod_knobs_reach_the_pods(rendered: dict[str, list[dict[str, Any]]]) -> None:
    values = chart.MATRIX["ci-sidecar"]
    objects = rendered["ci-sidecar"]
    spec = _leader_template(objects)["spec"]
    assert spec["runtimeClassName"] == values["runtimeClassName"]
    assert spec["priorityClassName"] == values["priorityClassName"]
    assert spec["securityContext"] == values["podSecurityContext"]
    assert spec["serviceAccountName"] == "inference"
    assert not [o for o in objects if o["kind"] == "ServiceAccount"]  # create: false
    sentinel = _container(spec, "sentinel")
    assert sentinel is not None
    assert _env(sentinel, "SENTINEL_LOG__LEVEL") == "debug"
    assert values["extraVolumeMounts"][0] in sentinel["volumeMounts"]
    assert values["extraVolumes"][0] in spec["volumes"]
    # Defaults: the chart's own ServiceAccount, no runtime or priority class.
    default = _leader_template(rendered["defaults"])["spec"]
    assert "runtimeClassName" not in default
    assert "priorityClassName" not in default
    (sa,) = [o for o in rendered["defaults"] if o["kind"] == "ServiceAccount"]
    assert default["serviceAccountName"] == sa["metadata"]["name"]


@pytest.mark.parametrize("case", ["defaults", "fleet-defaults"])
def test_a_bare_cluster_needs_no_crds(case: str, rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The defaults render only core kinds (validated above for 1.29 and 1.32): `helm install`
    works on a cluster without the Prometheus Operator or LWS."""
    apis = {o["apiVersion"] for o in rendered[case]}
    assert apis <= CORE_API, apis
    assert not [o for o in rendered[case] if o["kind"] == "NetworkPolicy"]


@pytest.mark.parametrize("case", ["sidecar-secured", "ci-sidecar", "ci-fleet"])
def test_secured_monitors_authenticate(case: str, rendered: dict[str, list[dict[str, Any]]]) -> None:
    values = chart.MATRIX[case]
    monitors = [o for o in rendered[case] if o["kind"] in ("PodMonitor", "ServiceMonitor")]
    assert monitors
    tls = values["exporter"].get("tls", {}).get("secretName")
    for m in monitors:
        endpoints = m["spec"].get("podMetricsEndpoints") or m["spec"]["endpoints"]
        for ep in endpoints:
            auth = ep["basicAuth"]
            assert auth["username"] == {"name": values["existingSecret"], "key": "scrape-username"}
            assert auth["password"] == {"name": values["existingSecret"], "key": "scrape-password"}
            if tls:
                assert ep["scheme"] == "https"
                assert ep["tlsConfig"]["ca"]["secret"] == {"name": tls, "key": "ca.crt"}
                assert ep["tlsConfig"]["serverName"]
                assert "insecureSkipVerify" not in ep["tlsConfig"]
            else:
                assert ep["scheme"] == "http"
                assert "tlsConfig" not in ep
            want = values.get("podMonitor" if m["kind"] == "PodMonitor" else "serviceMonitor", {})
            if want.get("metricRelabelings"):
                assert ep["metricRelabelings"] == want["metricRelabelings"]
            for extra in want.get("relabelings", []):
                assert ep["relabelings"][-1] == extra  # after the chart's job/instance ones
    plain = [o for o in rendered["ci-lws"] if o["kind"] == "PodMonitor"]
    assert plain
    assert "basicAuth" not in plain[0]["spec"]["podMetricsEndpoints"][0]


def test_monitor_auth_values_replace_the_derived_ones() -> None:
    token = {"name": "proxy-token", "key": "token"}
    objects = chart.render(
        {
            "existingSecret": "s",
            "exporter": {"basicAuth": True, "tls": {"secretName": "t", "caKey": ""}},
            "podMonitor": {"enabled": True, "bearerTokenSecret": token, "basicAuth": {"username": token}},
        }
    )
    (monitor,) = [o for o in objects if o["kind"] == "PodMonitor"]
    ep = monitor["spec"]["podMetricsEndpoints"][0]
    assert ep["bearerTokenSecret"] == token
    assert ep["basicAuth"] == {"username": token}
    assert ep["tlsConfig"] == {"insecureSkipVerify": True}  # no CA key: encrypted, unverified
    _validate_operator([monitor], "auth overrides")


@pytest.mark.parametrize("case", _sidecar_cases())
def test_the_network_policy_covers_both_ports(case: str, rendered: dict[str, list[dict[str, Any]]]) -> None:
    values = chart.MATRIX[case]
    policies = [o for o in rendered[case] if o["kind"] == "NetworkPolicy"]
    if not values.get("networkPolicy", {}).get("enabled"):
        assert not policies
        return
    (policy,) = policies
    rules = {r["ports"][0]["port"]: r for r in policy["spec"]["ingress"] if "ports" in r}
    assert set(rules) == {9480, 30000}
    np = values["networkPolicy"]
    for port, key in ((9480, "metricsFrom"), (30000, "apiFrom")):
        # An empty peer list admits anyone on that port (no `from`), never nobody.
        assert rules[port].get("from", []) == np.get(key, [])


def test_ci_values_cover_every_mode() -> None:
    cases = chart.ci_values()
    assert set(cases) == {"ci-sidecar", "ci-lws", "ci-fleet"}
    assert cases["ci-lws"]["sidecar"]["workload"] == "LeaderWorkerSet"
    assert cases["ci-fleet"]["mode"] == "fleet"


def test_every_value_is_documented() -> None:
    """README's values table comes from the `# --` comments: every leaf key has one (or sits
    under a documented key, like resources.requests.cpu)."""
    docs = chart.value_docs()

    def leaves(node: Any, prefix: str) -> list[str]:
        if isinstance(node, dict) and node:
            return [leaf for k, v in node.items() for leaf in leaves(v, f"{prefix}{k}.")]
        return [prefix.rstrip(".")]

    undocumented = [
        leaf
        for leaf in leaves(chart.DEFAULTS, "")
        if not any(leaf == d or leaf.startswith(d + ".") for d in docs)
    ]
    assert not undocumented, undocumented
    assert all(text and not text.startswith("#") for text in docs.values())
    table = chart.values_table()
    assert '| `sglang.service.type` | string | `"ClusterIP"` |' in table
    assert "| `podMonitor.enabled` | bool | `false` |" in table


def test_the_schema_knows_every_default_key() -> None:
    """values.schema.json rejects unknown keys, so it must list every key values.yaml has."""
    schema = json.loads((chart.CHART / "values.schema.json").read_text(encoding="utf-8"))

    def check(node: Any, sub: dict[str, Any], where: str) -> None:
        if not isinstance(node, dict) or "properties" not in sub:
            return
        assert sub.get("additionalProperties") is False, where
        for key, value in node.items():
            assert key in sub["properties"], f"{where}.{key}"
            check(value, sub["properties"][key], f"{where}.{key}")

    check(chart.DEFAULTS, schema, "values")


@pytest.mark.parametrize("case", list(chart.MATRIX))
def test_notes_say_how_to_reach_it_and_check_the_monitors(case: str) -> None:
    values = chart.MATRIX[case]
    text = chart.notes(values)
    assert "kubectl -n sentinel port-forward" in text
    assert "{{" not in text
    assert "<no value>" not in text
    fleet = values.get("mode") == "fleet"
    kind = "servicemonitor" if fleet else "podmonitor"
    enabled = values.get("serviceMonitor" if fleet else "podMonitor", {}).get("enabled", False)
    if fleet and values["fleet"].get("fileSd"):
        return
    if enabled:
        assert f"kubectl -n sentinel get {kind} -l app.kubernetes.io/instance=sentinel" in text
        assert f'up{{job="{values.get("jobLabel", "sentinel")}"}}' in text
    else:
        assert f"{'serviceMonitor' if fleet else 'podMonitor'}.enabled=true" in text


def test_chart_metadata() -> None:
    meta = yaml.safe_load((chart.CHART / "Chart.yaml").read_text(encoding="utf-8"))
    for key in ("home", "sources", "maintainers", "icon", "kubeVersion"):
        assert meta.get(key), key
    major, minor, _patch = (int(x) for x in meta["version"].split("."))
    assert (major, minor) >= (0, 3)
    readme = (chart.CHART / "README.md").read_text(encoding="utf-8")
    for section in ("## Install", "## Upgrade", "## Uninstall", "## Versioning", "## Values"):
        assert section in readme
    assert f"{meta['version']}:" in readme  # the versioning section names the current version
