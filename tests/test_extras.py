"""Optional extras: `make run` installs the runtime set only, and a command that needs a package of
an extra that is missing prints one sentence naming `make venv` or the pip extra (rmq/extras.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# Runs `rmq ARGS` in a Python where the listed top-level modules cannot be imported (None in
# sys.modules makes `import x` raise ModuleNotFoundError, as in a venv without the extra).
BLOCKED_RMQ = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
sys.argv = ["rmq"] + sys.argv[2:]
from rmq.cli import main
main()
"""


def rmq_without(blocked: list[str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKED_RMQ, ",".join(blocked), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def one_sentence(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.parametrize("args, blocked, command, extra", [
    (["lab", "run", "labs/library/nothing.yaml"], ["pydantic"], "`rmq lab`", "labs"),
    (["demo", "list"], ["pydantic"], "`rmq demo`", "labs"),
    (["exercise", "list"], ["pydantic"], "`rmq exercise`", "labs"),
    (["bench", "spark"], ["pyspark"], "`rmq bench spark`", "spark"),
    (["pipeline", "run", "orders"], ["pyspark"], "`rmq pipeline run`", "spark"),
    (["bench", "kafka", "--count", "1", "--bootstrap", "127.0.0.1:1"], ["confluent_kafka"], "`rmq bench kafka`",
     "interop"),
    (["bench", "fuzz", "--engine", "atheris"], ["atheris"], "`rmq bench fuzz --engine atheris`", "fuzz"),
])
def test_a_missing_extra_is_one_sentence_naming_what_to_install(args, blocked, command, extra):
    line = one_sentence(rmq_without(blocked, *args))
    assert line.startswith(f"Error: {command} needs "), line
    assert "make venv" in line and f"pip install -e '.[{extra}]'" in line, line


def test_without_the_labs_extra_rmq_still_lists_the_labs_commands_and_warns_nothing():
    res = rmq_without(["pydantic", "matplotlib", "docker"], "--help")
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    for name in ("lab", "demo", "exercise", "up", "admin"):
        assert f"\n  {name} " in res.stdout, res.stdout


def test_a_missing_module_of_no_extra_is_still_a_traceback():
    """Only the extras' packages turn into the sentence: a broken install stays visible."""
    res = rmq_without(["rmq.admin.cli"], "admin", "--help")
    assert res.returncode != 0 and "ModuleNotFoundError" in res.stderr


def test_the_extras_hold_what_the_guard_names():
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        extras = tomllib.load(fh)["project"]["optional-dependencies"]
    from rmq.extras import PROVIDERS
    for module, (pip_name, extra) in PROVIDERS.items():
        assert extra in extras, (module, extra)
        if pip_name not in ("pandas", "grpcio"):          # brought by pyspark[connect]
            assert any(req.split("[")[0].split(">")[0].split("=")[0].split(";")[0].strip() == pip_name
                       for req in extras[extra]), (module, pip_name, extras[extra])
    labs = " ".join(extras["labs"])
    for pkg in ("pydantic", "matplotlib", "docker", "confluent-kafka", "rocketmq"):
        assert pkg in labs
    assert "rmq-bridge[spark,labs,interop,fuzz]" in extras["dev"]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
@pytest.mark.parametrize("target, installs", [("run", "."), ("shell", "."), ("bench", "."),
                                               ("venv", "'.[dev]'"), ("test", "'.[dev]'")])
def test_make_targets_install_their_own_set(tmp_path, target, installs):
    """`make -n` on a fresh venv path: run/shell/bench install the runtime set, venv/test the dev set."""
    venv = tmp_path / "venv"
    res = subprocess.run(["make", "-n", "-C", ROOT, target, f"VENV={venv}"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    pip = [ln for ln in res.stdout.splitlines() if "pip install -q -e" in ln]
    assert len(pip) == 1 and pip[0].endswith(f"pip install -q -e {installs}"), res.stdout
    assert f"-m venv {venv}" in res.stdout
