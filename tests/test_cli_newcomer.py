"""The command line as a newcomer meets it: `generate --help` says where songs go; the demo can be run again
without piling up copies of its songs, keeps a folder per demo, says at once when its kernel died and why, ends on
SIGTERM with its kernel, prints no escape codes or tracebacks, and needs nothing a plain `pip install .` lacks."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from helpers import wait_until
from jupyter_utils import NOTEBOOK_NAMES, sandbox_env

from ipymusicgen.__main__ import fresh_downloads, main

ROOT = Path(__file__).resolve().parents[1]


def test_generate_help_shows_the_command_and_where_songs_go(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert 'python -m ipymusicgen generate "lo-fi rain"' in said
    assert "(default: songs/)" in said


def test_demo_help_says_each_run_replaces_its_downloads(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "magics-tour" in said and "replaces" in said


def test_each_demo_run_downloads_into_a_fresh_folder(tmp_path: Path) -> None:
    old = tmp_path / "downloads"
    old.mkdir()
    (old / "Songs of Lighthouse.mp3").write_bytes(b"ID3 an earlier run")
    (old / "nested").mkdir()
    folder = fresh_downloads(tmp_path)
    assert folder == old and folder.is_dir() and not any(folder.iterdir())


def _demo(cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = sandbox_env(XDG_DATA_HOME=str(cwd / "data"), TMPDIR=str(cwd))
    return subprocess.run(
        [sys.executable, "-m", "ipymusicgen", "demo", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
    )  # fmt: skip


def _own_notebook(cwd: Path, name: str, *cells: str) -> None:
    """A notebook the demo finds in ./notebooks (after the package's own)."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(cell) for cell in cells]
    (cwd / "notebooks").mkdir(exist_ok=True)
    nbformat.write(notebook, cwd / "notebooks" / f"{name}.ipynb")


@pytest.mark.slow  # three notebook runs in kernels
@pytest.mark.timeout(1200)  # each run is a minute or more beside a CPU hog: three can pass the default 300 s
def test_each_demo_keeps_its_own_folder_and_ends_without_tracebacks(tmp_path: Path) -> None:
    for run in ("first", "second"):
        done = _demo(tmp_path, "--timeout", "300")
        assert done.returncode == 0, f"{run} run: {done.stdout}{done.stderr}"
    quickstart = tmp_path / "artifacts" / "demo" / "quickstart"
    songs = sorted(p.name for p in (quickstart / "downloads").iterdir())
    assert len(songs) == 1 and not re.search(r" \(\d+\)\.mp3$", songs[0]), songs
    assert songs[0] in done.stdout  # the line naming the MP3 names this run's file
    studio = _demo(tmp_path, "widgets-studio", "--timeout", "300")
    assert studio.returncode == 0, studio.stdout + studio.stderr
    assert "Traceback" not in studio.stderr and "\x1b" not in studio.stdout + studio.stderr, studio.stderr
    assert sorted(p.name for p in (quickstart / "downloads").iterdir()) == songs, "another demo kept this one's song"
    mp3 = re.search(r"^MP3: +(.*) \(", studio.stdout, re.M)
    assert mp3 and Path(mp3.group(1)).parent == tmp_path / "artifacts" / "demo" / "widgets-studio" / "downloads"


@pytest.mark.slow  # a kernel that crashes
def test_a_demo_whose_kernel_dies_says_so_at_once_and_why(tmp_path: Path) -> None:
    _own_notebook(tmp_path, "crashes", "print('fine')", "import ctypes\nctypes.string_at(0)", "print('never')")
    done = _demo(tmp_path, "crashes", timeout=300)  # before: the cell's 600 s timeout, the kernel a zombie
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stderr.strip()
    assert said.startswith("error: the kernel died while running cell 2 (killed by SIGSEGV"), said
    assert "Fatal Python error: Segmentation fault" in said and "kernel.log" in said
    assert "\x1b" not in done.stdout + said and "Traceback" not in said
    assert (tmp_path / "artifacts" / "demo" / "crashes" / "crashes.ipynb").exists(), "the notebook is saved anyway"


@pytest.mark.slow  # a kernel, a signal
def test_sigterm_ends_a_demo_and_its_kernel_at_once(tmp_path: Path) -> None:
    started = tmp_path / "artifacts" / "demo" / "sleeps" / "kernel.pid"
    _own_notebook(
        tmp_path, "sleeps", "import os, time\nopen('kernel.pid', 'w').write(str(os.getpid()))\ntime.sleep(600)"
    )
    env = sandbox_env(XDG_DATA_HOME=str(tmp_path / "data"), TMPDIR=str(tmp_path))
    demo = subprocess.Popen(
        [sys.executable, "-m", "ipymusicgen", "demo", "sleeps"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        wait_until(lambda: started.exists() and started.read_text().isdigit(), "the cell to start", timeout=300)
        kernel = int(started.read_text())
        demo.send_signal(signal.SIGTERM)
        out, err = demo.communicate(timeout=60)  # before: SIGTERM was never handled while a cell ran
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 128 + signal.SIGTERM, out + err
    assert "stopped by SIGTERM while running cell 1" in err and "Traceback" not in err
    with pytest.raises(ProcessLookupError):
        os.kill(kernel, 0)  # the kernel went with it


@pytest.mark.slow  # a kernel
def test_a_missing_module_is_named_with_its_install_command_and_no_escape_codes(tmp_path: Path) -> None:
    _own_notebook(tmp_path, "needs", "import no_such_module_for_the_demo")
    done = _demo(tmp_path, "needs", timeout=300)
    assert done.returncode == 1
    assert "\x1b" not in done.stdout + done.stderr, "a pipe gets no colour codes"
    assert "ModuleNotFoundError: No module named 'no_such_module_for_the_demo'" in done.stderr
    assert f"{sys.executable} -m pip install no_such_module_for_the_demo" in done.stderr


def test_what_the_demo_notebooks_use_comes_with_a_plain_pip_install() -> None:
    """`pip install .` is enough for every demo (README): each third-party module a demo notebook imports, and
    pandas for the tables its `to_pandas()` makes, is among the package's own dependencies, not an extra."""
    import importlib.metadata

    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    installed = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    installed |= {"ipython", "ipymusicgen"}
    distributions = importlib.metadata.packages_distributions()
    needed: dict[str, str] = {}
    for name in NOTEBOOK_NAMES:
        notebook = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
        code = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
        modules = set(re.findall(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", code, re.M))
        if "to_pandas(" in code:
            modules.add("pandas")
        for module in modules - set(sys.stdlib_module_names) - {"ipymusicgen", "IPython"}:
            for dist in distributions.get(module, [module]):
                needed[dist.lower()] = name
    missing = {dist: demo for dist, demo in needed.items() if dist not in installed}
    assert missing == {}, f"demos need these beyond the dependencies: {missing}"


@pytest.mark.parametrize(("euid", "allowed"), [(0, True), (1000, False)])
def test_the_open_it_command_works_as_root(euid: int, allowed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from ipymusicgen.__main__ import _where_to_open

    monkeypatch.setattr(os, "geteuid", lambda: euid)
    command = _where_to_open(Path("/tmp/demo dir/quickstart.ipynb"))
    assert ("lab --allow-root '/tmp/demo dir/quickstart.ipynb'" in command) is allowed, command
    assert command.endswith("lab '/tmp/demo dir/quickstart.ipynb'") is not allowed
