"""The package's face: every public name resolves, and importing it stays light."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from jupyter_utils import NOTEBOOK_NAMES, sandbox_env

import ipymusicgen


def test_every_public_name_resolves() -> None:
    assert [name for name in ipymusicgen.__all__ if not hasattr(ipymusicgen, name)] == []
    assert issubclass(ipymusicgen.InsufficientCreditsError, ipymusicgen.EnvelopeError)


def test_import_leaves_the_heavy_parts_for_later() -> None:
    heavy = ("numpy", "fastapi", "uvicorn", "ipywidgets", "IPython", "asyncio", "lameenc")
    code = f"import sys, ipymusicgen; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == ""


@pytest.mark.slow
def test_the_shared_session_closes_its_connections_at_exit() -> None:
    code = "from ipymusicgen.workspace import session; session.get_client().key_info()"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env["MUSICGEN_SANDBOX_STAGE_SECONDS"] = "0.1"
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, check=True, env=env, timeout=60
    )
    assert "sandbox mode" in done.stdout and "ResourceWarning" not in done.stderr, done.stderr


# -- what a `pip install .` gets, and the demo it runs ------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip install .` would build, built offline from this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", str(ROOT), "-w", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("ipymusicgen-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_ships_types_front_end_files_and_the_demo_notebooks(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "ipymusicgen/py.typed" in names
    static = sorted(n for n in names if n.startswith("ipymusicgen/widgets/static/"))
    folder = ROOT / "src" / "ipymusicgen" / "widgets" / "static"
    in_tree = sorted(f"ipymusicgen/widgets/static/{p.name}" for p in folder.glob("*") if p.is_file())
    assert static == in_tree and any(n.endswith(".js") for n in static) and any(n.endswith(".css") for n in static)
    assert {f"ipymusicgen/notebooks/{name}.ipynb" for name in NOTEBOOK_NAMES} <= names, "every demo notebook ships"
    assert not any("/downloads/" in n or "checkpoint" in n for n in names), "no stray files from the tree"


@pytest.mark.slow  # executes a notebook in a kernel
def test_demo_from_an_installed_wheel_says_where_everything_went(wheel: Path, tmp_path: Path) -> None:
    """The demo as a newcomer runs it after `pip install .`: from another folder, not the checkout, on the sandbox.

    The package comes from the unpacked wheel (first on PYTHONPATH, for this process and its kernel), so
    the notebook it runs is the one the wheel ships; downloads land under the output folder only.
    """
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    work = tmp_path / "work"
    work.mkdir()
    env = sandbox_env(PYTHONPATH=str(site), TMPDIR=str(tmp_path))
    where = subprocess.run(
        [sys.executable, "-c", "import ipymusicgen.__main__ as m; print(m.notebook_source('quickstart'))"],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        check=True,
    ).stdout.strip()
    assert where == str(site / "ipymusicgen" / "notebooks" / "quickstart.ipynb")
    downloads_in_tree = (ROOT / "notebooks" / "downloads").exists()
    done = subprocess.run(
        [sys.executable, "-m", "ipymusicgen", "demo", "--timeout", "300"],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = dict(re.findall(r"^(Service|Notebook|MP3|Open it): +(.*)$", done.stdout, flags=re.MULTILINE))
    out = work / "artifacts" / "demo" / "quickstart"  # a folder per demo
    assert "local sandbox" in lines["Service"]
    assert lines["Notebook"].startswith(f"{out / 'quickstart.ipynb'} (")
    executed = nbformat.read(out / "quickstart.ipynb", as_version=4)
    assert "quickstart OK" in json.dumps([cell.get("outputs", []) for cell in executed.cells])
    mp3 = Path(lines["MP3"].rsplit(" (", 1)[0])
    assert mp3.parent == out / "downloads" and mp3.suffix == ".mp3" and mp3.stat().st_size > 1000
    root = " --allow-root" if os.geteuid() == 0 else ""  # JupyterLab refuses root without it
    assert lines["Open it"].endswith(f"lab{root} {out / 'quickstart.ipynb'}")
    assert (ROOT / "notebooks" / "downloads").exists() == downloads_in_tree, "nothing written into the source tree"
    assert "WARNING" not in done.stderr, done.stderr


def test_demo_names_the_real_service_by_its_host_and_never_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from ipymusicgen.__main__ import _service_in_use

    monkeypatch.setenv("MUSICGEN_API_KEY", "sk-canary-0123456789abcdef")
    monkeypatch.setenv("MUSICGEN_BASE_URL", "https://music.example.com")
    said = _service_in_use()
    assert "real service at https://music.example.com" in said and "canary" not in said


def test_ci_runs_the_readme_test_command_after_setting_up() -> None:
    """`.ci/run` on a fresh machine: the setup (which installs everything), then exactly the README's command 2."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = re.search(r"^# 2\..*\n(\./scripts/setup && .+)$", readme, flags=re.MULTILINE)
    assert command, "README command 2 not found"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    steps = command.group(1).split(" && ")
    assert steps[0] == "./scripts/setup" and "./scripts/setup" in ci
    assert " && ".join(steps[1:]) in ci
    assert os.access(ROOT / ".ci" / "run", os.X_OK) and os.access(ROOT / "scripts" / "setup", os.X_OK)


def test_the_package_functions_named_like_modules_stay_functions() -> None:
    """`ipymusicgen.library` is the function whatever loads later (no module shares its name: the class lives in
    `song_library`), in a fresh process that uses the library the way a script does."""
    import subprocess
    import sys

    code = (
        "import ipymusicgen, ipymusicgen.workspace.session\n"
        "from ipymusicgen import library\n"
        "ipymusicgen.workspace.session.library  # the session's own\n"
        "import ipymusicgen.song_library\n"
        "from ipymusicgen import library as again\n"
        "assert callable(library) and callable(again) and callable(ipymusicgen.analyze), (library, again)\n"
        "assert callable(ipymusicgen.waveform) and callable(ipymusicgen.grid)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
