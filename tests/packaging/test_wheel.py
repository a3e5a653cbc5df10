"""The wheel runs anywhere: built from the sdist, installed into a fresh venv outside the checkout.

The checkout's files (git's view: tracked and untracked-but-not-ignored) are copied to a temporary
folder, an sdist is built there, and the wheel is built from the unpacked sdist (as ``python -m
build`` does), offline (``--no-build-isolation``: the checkout venv's setuptools). The wheel goes
into a fresh venv created outside the checkout; to stay fast and offline, that venv sees the
already installed dependencies through one ``.pth`` line naming a folder of links to the checkout
venv's site-packages entries, without this project's own editable finder and metadata (and a
``.pth`` file inside a folder named by a ``.pth`` line is never processed anyway). Then, from an
empty folder, with no ``PYTHONPATH`` and no ``DIAG_*`` settings: ``sre-diag demo``, ``sre-diag
diagnose`` against the shipped scripted model server, ``sre-diag replay`` of a recorded event
and of the bundled sample event, ``sre-diag eval --replay`` of the bundled eval suite, the
business-database setup module, and ``import sre_diag; from sre_diag import register`` — all from
the venv, not the checkout.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import time
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sre_diag.doubles.scripted_model import ScriptedModelServer
from tests.harness.support import call, draft_json, final_step, tool_step

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 300
RUN_TIMEOUT = 120
W = {"start": "2026-11-28T10:00:00Z", "end": "2026-11-28T10:30:00Z"}
# Left out of the copy the sdist is built from: this project's build products.
_OWN = ("sre_diag", "__editable__", "__pycache__")


@dataclass(frozen=True)
class Installed:
    root: Path
    venv: Path
    wheel: Path
    sdist: Path
    build_seconds: float

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def script(self) -> Path:
        return self.venv / "bin" / "sre-diag"


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False
    )
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _copy_checkout(target: Path) -> None:
    """The files git would put in a release: tracked and untracked-but-not-ignored."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], REPO)
    for rel in sorted(set(filter(None, listed.split("\0")))):
        source, dest = REPO / rel, target / rel
        if not source.is_symlink() and not source.is_file():
            continue  # deleted in the working tree, not yet committed
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            dest.symlink_to(os.readlink(source))
        else:
            dest.write_bytes(source.read_bytes())


def _dependencies_folder(target: Path) -> Path:
    """Links to every entry of this venv's site-packages except this project's own."""
    site = Path(sysconfig.get_paths()["purelib"])
    target.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith(_OWN) and not entry.name.endswith(".pth"):
            (target / entry.name).symlink_to(entry)
    return target


def _clean_env(venv: Path, **extra: str) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DIAG_", "OPENAI_", "SLACK_", "PYTHON", "VIRTUAL_ENV", "XDG_"))
    }
    env["HOME"] = str(venv.parent / "home")  # the state folder lands in a home of the test's
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    started = time.monotonic()
    root = tmp_path_factory.mktemp("wheel").resolve()
    assert not root.is_relative_to(REPO)
    source = root / "source"
    _copy_checkout(source)
    dist = root / "dist"
    build_sdist = (
        "import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))"
    )
    name = _run([sys.executable, "-c", build_sdist, str(dist)], source).strip().splitlines()[-1]
    sdist = dist / name
    with tarfile.open(sdist) as archive:
        archive.extractall(root / "unpacked", filter="data")
    (unpacked,) = (root / "unpacked").iterdir()
    _run(
        [sys.executable, "-m", "pip", "wheel", str(unpacked), "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(dist)],
        root,
    )  # fmt: skip
    (wheel,) = dist.glob("*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], root)
    venv_site = Path(
        _run(
            [str(venv / "bin" / "python"), "-c",
             "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            root,
        ).strip()
    )  # fmt: skip
    deps = _dependencies_folder(root / "deps")
    (venv_site / "checkout_dependencies.pth").write_text(f"{deps}\n", encoding="utf-8")
    _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-index", "-q",
         "--disable-pip-version-check", str(wheel)],
        root, env=_clean_env(venv),
    )  # fmt: skip
    yield Installed(root, venv, wheel, sdist, time.monotonic() - started)


@pytest.fixture
def empty_dir(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("empty").resolve()
    assert not folder.is_relative_to(REPO) and not any(folder.iterdir())
    return folder


async def _sre_diag(
    installed: Installed, cwd: Path, *args: str, **env: str
) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        str(installed.script),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_clean_env(installed.venv, **env),
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=RUN_TIMEOUT)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _installed_path(installed: Installed, cwd: Path, expression: str) -> Path:
    code = f"import sre_diag.resources as r; print({expression})"
    return Path(_run([str(installed.python), "-c", code], cwd, _clean_env(installed.venv)).strip())


def test_the_wheel_carries_every_module_and_the_data(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    for module in (REPO / "plugin").rglob("*.py"):
        rel = "sre_diag/" + module.relative_to(REPO / "plugin").as_posix()
        assert rel in names or "__pycache__" in rel, f"{rel} is not in the wheel"
    for module in (REPO / "tools").rglob("*.py"):
        rel = "sre_diag/tools/" + module.relative_to(REPO / "tools").as_posix()
        assert rel in names or "__pycache__" in rel, f"{rel} is not in the wheel"
    prompts = {p.name for p in (REPO / "prompts").glob("*.md")}
    assert {f"sre_diag/resources/prompts/{p}" for p in prompts} <= names
    incident = REPO / "examples" / "incident"
    for pattern in ("runbooks/*.md", "logs/*/*/*.jsonl", "cassettes/*.json", "mysql/*.sql"):
        files = {p.relative_to(incident).as_posix() for p in incident.glob(pattern)}
        assert files and {f"sre_diag/resources/incident/{f}" for f in files} <= names, pattern
    assert "sre_diag/resources/incident/mysql/seed.py" in names
    assert {"sre_diag/resources/manifest.yaml", "sre_diag/resources/manifest.http.yaml"} <= names
    suite = REPO / "examples" / "evals"
    for pattern in ("*/*.json", "*/*.sql", "*/runbooks/*.md", "*/logs/*/*/*.jsonl"):
        files = {p.relative_to(suite).as_posix() for p in suite.glob(pattern)}
        assert files and {f"sre_diag/resources/evals/{f}" for f in files} <= names, pattern
    assert "sre_diag/resources/slack/app_mention.json" in names
    assert "sre_diag/commands/setup_mysql.py" in names
    print(f"\nwheel built and installed in {installed.build_seconds:.1f} s")


def test_the_release_files_pass_twine_check(installed: Installed) -> None:
    """The sdist and the wheel carry metadata PyPI accepts: the licence as an SPDX expression
    with its file, and a README that renders."""
    twine = Path(sys.executable).parent / "twine"
    out = _run([str(twine), "check", "--strict", str(installed.sdist), str(installed.wheel)], REPO)
    assert out.count("PASSED") == 2, out
    with zipfile.ZipFile(installed.wheel) as wheel:
        (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        text = wheel.read(metadata).decode()
        licences = [n for n in wheel.namelist() if n.endswith("licenses/LICENSE")]
    assert "License-Expression: Apache-2.0" in text and licences, text[:600]
    assert "Project-URL: Documentation" in text and "Keywords:" in text


def test_the_wheel_installs_one_top_level_package(installed: Installed) -> None:
    """Exactly one import package, ``sre_diag``; nothing named ``plugin`` or ``tools`` lands in
    site-packages (a host app's own packages of those names must keep working beside ours)."""
    names = zipfile.ZipFile(installed.wheel).namelist()
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"sre_diag"}
    site = next(installed.venv.glob("lib/python*/site-packages"))
    assert not (site / "tools").exists() and not (site / "plugin").exists()
    info = next(site.glob("sre_diag-*.dist-info"))
    if (info / "top_level.txt").exists():
        assert (info / "top_level.txt").read_text().split() == ["sre_diag"]


async def test_the_demo_runs_beside_a_host_with_its_own_plugin_and_tools(
    installed: Installed, empty_dir: Path
) -> None:
    """A host Bolt app whose folder holds its own ``plugin`` and ``tools`` packages (first on
    ``sys.path``): ``python -m sre_diag demo`` and ``register(app)`` still use our code."""
    host = empty_dir / "host"
    for own in ("plugin", "tools"):
        (host / own).mkdir(parents=True)
        (host / own / "__init__.py").write_text("HOST = True\n")
        for sub in ("base", "logs", "slack", "harness", "register"):
            (host / own / f"{sub}.py").write_text(f"raise ImportError('the host {own} was used')\n")
    code = (
        "import plugin, tools; from sre_diag import register; import sre_diag.tools.logs as ours\n"
        "from slack_bolt.async_app import AsyncApp\n"
        "app = AsyncApp(token='xoxb-host', signing_secret='s')\n"
        "handle = register(app, settings=None)\n"
        "print(plugin.HOST, tools.HOST, ours.__name__, register.__module__, type(handle).__name__)"
    )
    env = _clean_env(installed.venv, DIAG_ADMIN_CHANNELS="C0123ABC", PYTHONPATH=str(host))
    out = _run([str(installed.python), "-c", code], host, env)
    assert out.split()[-5:] == [
        "True", "True", "sre_diag.tools.logs", "sre_diag.slack.mount", "PluginHandle"
    ]
    process = await asyncio.create_subprocess_exec(
        str(installed.python), "-m", "sre_diag", "demo",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=_clean_env(installed.venv), cwd=host,
    )  # fmt: skip
    out_b, err_b = await asyncio.wait_for(process.communicate(), timeout=RUN_TIMEOUT)
    assert process.returncode == 0, err_b.decode()[-2000:]
    assert json.loads(out_b.decode().strip().splitlines()[-1])["outcome"] == "DRAFT"


def test_the_sdist_carries_prompts_incident_and_manifest(installed: Installed) -> None:
    with tarfile.open(installed.sdist) as archive:
        members = {m.name.split("/", 1)[1] for m in archive.getmembers() if "/" in m.name}
    assert {"manifest.yaml", "manifest.http.yaml", "pyproject.toml"} <= members
    assert "prompts/diagnosis_system.zh.md" in members
    assert "examples/incident/runbooks/db-connection-pool.en.md" in members
    assert "examples/incident/cassettes/with-mysql.json" in members
    assert "examples/incident/mysql/schema.sql" in members


def test_the_package_imports_from_the_venv(installed: Installed, empty_dir: Path) -> None:
    code = (
        "import sre_diag; from sre_diag import register; "
        "print(sre_diag.__file__, register.__module__)"
    )
    out = _run([str(installed.python), "-c", code], empty_dir, _clean_env(installed.venv))
    location, module = out.split()
    assert Path(location).resolve().is_relative_to(installed.venv.resolve()), location
    assert not Path(location).resolve().is_relative_to(REPO)
    assert module == "sre_diag.slack.mount"  # re-exported lazily by sre_diag.slack and sre_diag
    for name in ("BUNDLED_KNOWLEDGE", "BUNDLED_LOGS", "BUNDLED_CASSETTES"):
        path = _installed_path(installed, empty_dir, f"r.{name}")
        assert path.is_relative_to(installed.venv.resolve()) and path.is_dir(), name
    manifest = _run(
        [str(installed.python), "-c", "import sre_diag.resources as r; print(r.manifest_text())"],
        empty_dir,
        _clean_env(installed.venv),
    )
    assert manifest.startswith("# Slack app manifest")
    for name, file in (("manifest", "manifest.yaml"), ("manifest-http", "manifest.http.yaml")):
        shipped = _run(
            [str(installed.python), "-m", "sre_diag.resources", name],
            empty_dir,
            _clean_env(installed.venv),
        ).strip()
        assert Path(shipped).resolve().is_relative_to(installed.venv.resolve()), shipped
        assert Path(shipped).read_bytes() == (REPO / file).read_bytes(), name


async def test_demo_runs_from_an_empty_folder(installed: Installed, empty_dir: Path) -> None:
    code, out, err = await _sre_diag(installed, empty_dir, "demo")
    assert code == 0, err
    assert "DRAFT" in out and "Checks:" in out
    assert json.loads(out.strip().splitlines()[-1])["outcome"] == "DRAFT"
    assert "Traceback" not in err
    assert _listing(empty_dir) == []  # the audit and the cache went to the state folder
    state = installed.venv.parent / "home" / ".local" / "state" / "sre-diag"
    assert _listing(state) == ["audit", "cache"]


async def test_a_first_run_without_settings_says_what_to_do(
    installed: Installed, empty_dir: Path
) -> None:
    """No model, no settings: diagnose refuses naming what to set, check names the model's
    state, --version answers, and nothing is written where the commands ran."""
    code, out, err = await _sre_diag(installed, empty_dir, "diagnose", "payment-api 5xx")
    assert code == 2, err
    assert json.loads(out)["error"]["code"] == "MODEL_NOT_CONFIGURED"
    code, out, err = await _sre_diag(installed, empty_dir, "check")
    assert code == 0, out + err
    assert any(ln.startswith("model ") and "not configured" in ln for ln in out.splitlines())
    code, out, _err = await _sre_diag(installed, empty_dir, "--version")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert code == 0 and out.strip() == f"sre-diag {project['version']}"
    assert _listing(empty_dir) == []


async def test_diagnose_against_the_scripted_model(installed: Installed, empty_dir: Path) -> None:
    knowledge = _installed_path(installed, empty_dir, "r.BUNDLED_KNOWLEDGE")
    logs = _installed_path(installed, empty_dir, "r.BUNDLED_LOGS")
    steps = [
        tool_step(call("call-1", "query_logs", {"service": "payment-api", "level": "ERROR", **W})),
        tool_step(
            call(
                "call-2",
                "lookup_knowledge",
                {"query": "db pool exhausted 连接池"},
                previous=("call-1", "GAINED"),
            )
        ),
        final_step(draft_json(conclusion=False)),
    ]
    async with ScriptedModelServer(steps) as server:
        code, out, err = await _sre_diag(
            installed,
            empty_dir,
            "diagnose",
            "payment-api 5xx since 10:05 UTC",
            OPENAI_BASE_URL=server.base_url,
            OPENAI_API_KEY="sk-wheel-test",
            DIAG_MODEL="scripted-model",
            DIAG_KNOWLEDGE_DIR=str(knowledge),
            DIAG_LOGS_SOURCE=str(logs),
        )
    assert code == 0, err
    server.assert_complete()
    result = json.loads(out)
    assert result["outcome"] == "DRAFT"
    checks = result["progress"]["checks"]
    assert [c["status"] for c in checks] == ["READY", "READY"]
    assert all(c["item_count"] > 0 for c in checks)


async def test_replay_of_a_recorded_event(installed: Installed, empty_dir: Path) -> None:
    event = empty_dir / "app_mention.json"
    event.write_bytes((REPO / "examples" / "slack" / "app_mention.json").read_bytes())
    async with ScriptedModelServer([final_step(draft_json(conclusion=False))]) as server:
        code, out, err = await _sre_diag(
            installed,
            empty_dir,
            "replay",
            str(event),
            OPENAI_BASE_URL=server.base_url,
            OPENAI_API_KEY="sk-wheel-test",
            DIAG_MODEL="scripted-model",
        )
    assert code == 0, err
    server.assert_complete()
    assert "[chat.postMessage thread_ts=1795860360.000100]" in out
    assert json.loads(out.strip().splitlines()[-1])["outcome"] == "DRAFT"


async def test_replay_of_the_bundled_sample_event(installed: Installed, empty_dir: Path) -> None:
    """README's replay example, with the envelope the wheel ships (not the checkout's copy)."""
    event = _installed_path(installed, empty_dir, "r.sample_slack_event()")
    assert event.is_relative_to(installed.venv.resolve()) and event.is_file()
    out = _run(
        [str(installed.python), "-m", "sre_diag.resources", "slack-event"],
        empty_dir,
        _clean_env(installed.venv),
    )
    assert Path(out.strip()) == event
    async with ScriptedModelServer([final_step(draft_json(conclusion=False))]) as server:
        code, out, err = await _sre_diag(
            installed,
            empty_dir,
            "replay",
            str(event),
            OPENAI_BASE_URL=server.base_url,
            OPENAI_API_KEY="sk-wheel-test",
            DIAG_MODEL="scripted-model",
        )
    assert code == 0, err
    server.assert_complete()
    assert json.loads(out.strip().splitlines()[-1])["outcome"] == "DRAFT"


async def test_eval_replay_of_the_bundled_suite(installed: Installed, empty_dir: Path) -> None:
    """README's offline eval example from the wheel: every bundled case runs from its recorded
    cassettes (the MySQL cases are SKIPPED without ``--mysql-admin-dsn``), exit 0."""
    suite = _installed_path(installed, empty_dir, "r.bundled_evals()")
    assert suite.is_relative_to(installed.venv.resolve()) and suite.is_dir()
    report = empty_dir / "report.json"
    code, out, err = await _sre_diag(
        installed, empty_dir, "eval", "--replay", str(suite), "--out", str(report),
        DIAG_LOG_LEVEL="WARNING",
    )  # fmt: skip
    assert code == 0, out + err[-2000:]
    runs = json.loads(report.read_text(encoding="utf-8"))["runs"]
    cases = {case.parent.name for case in (REPO / "examples" / "evals").glob("*/case.json")}
    assert len(cases) == 10 and {run["case"] for run in runs} == cases
    assert "Traceback" not in err


def test_the_database_setup_ships_as_a_module(installed: Installed, empty_dir: Path) -> None:
    """README's business-database setup runs from the wheel: ``python -m
    sre_diag.commands.setup_mysql`` (its usage here; an unreachable server is exit 2, one line)."""
    out = _run(
        [str(installed.python), "-m", "sre_diag.commands.setup_mysql", "--help"],
        empty_dir,
        _clean_env(installed.venv),
    )
    assert "--admin-dsn" in out and "--ro-password" in out
    done = subprocess.run(
        [str(installed.python), "-m", "sre_diag.commands.setup_mysql",
         "--admin-dsn", "mysql://nobody@127.0.0.1:9"],
        cwd=empty_dir, env=_clean_env(installed.venv), capture_output=True, text=True,
        timeout=RUN_TIMEOUT, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith("setup_mysql: cannot reach MySQL/MariaDB at 127.0.0.1:9")
