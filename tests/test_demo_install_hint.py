"""A demo that stops on a missing module says what to install (issue 42 item 6): a module of one of the package's
extras names the extra (its pinned set, e.g. filelock beside librosa), and a module whose import name is not its
package's name names the package (`pip install sklearn` and `pip install yaml` do not install them)."""

from __future__ import annotations

import shlex
import sys

import pytest


class _Failed(Exception):
    ename = "ModuleNotFoundError"


@pytest.mark.parametrize(
    ("module", "install"),
    [
        ("librosa", "'ipymusicgen[analysis]'"),
        ("pyloudnorm.meter", "'ipymusicgen[analysis]'"),
        ("psycopg", "'ipymusicgen[gateway]'"),
        ("sklearn", "scikit-learn"),
        ("yaml", "pyyaml"),
        ("no_such_module_for_the_demo", "no_such_module_for_the_demo"),
    ],
)
def test_a_missing_module_is_named_with_what_installs_it(module: str, install: str) -> None:
    from ipymusicgen.__main__ import _failure

    failed = _Failed()
    failed.evalue = f"\x1b[0;31mNo module named '{module}'\x1b[0m"  # type: ignore[attr-defined]
    said = _failure(failed, 1, "")
    assert said.endswith(f"{shlex.quote(sys.executable)} -m pip install {install})"), said
    assert "\x1b" not in said
