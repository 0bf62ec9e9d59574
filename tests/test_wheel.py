"""The built wheel works where a user installs it (issue 27, item 16): everything a
command needs ships inside the package, nothing is read from the source tree.

How, as cheaply as stays sound:

- The wheel is built offline from a copy of the package's files (``pip wheel --no-deps
  --no-build-isolation``, with the setuptools the dev extras install), so the build
  writes no ``build/`` or ``*.egg-info`` into the checkout.
- It goes into a fresh venv in a temporary directory, without pip and with ``--no-deps``.
  The heavy dependencies (pyspark is half a gigabyte) are not installed again: a ``.pth``
  file puts this environment's site-packages *after* the venv's own. A path line in a
  ``.pth`` file does not run that directory's own ``.pth`` files, so an editable install
  of the checkout there stays off, and ``eos_runtime`` is the wheel's (checked first).
  ``--system-site-packages`` would not do: the dependencies live in the project's venv,
  not in the system's site.
- ``eos demo`` runs from another directory, with no ``PYTHONPATH`` and no ``EOS_``
  setting of this session, on a few hundred lines.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _copy_sources(to: Path) -> Path:
    """What the build reads: the project file, the readme it names, the package."""
    src = to / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "eos_runtime", src / "eos_runtime",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return src


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(args, capture_output=True, text=True, **kwargs)
    assert p.returncode == 0, f"{' '.join(map(str, args))} failed:\n{p.stdout}\n{p.stderr}"
    return p


def test_eos_demo_runs_from_the_installed_wheel(tmp_path):
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java")
    have = version("setuptools")
    assert int(have.split(".")[0]) >= 77, (
        f"setuptools {have} cannot build the wheel ([build-system] needs >= 77): run "
        f"bash scripts/bootstrap, whose dev extras install it")
    src = _copy_sources(tmp_path)
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--no-index", "--quiet", "--wheel-dir", str(wheels), str(src)], timeout=120)
    [wheel] = wheels.glob("eos_runtime-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert "eos_runtime/examples/wordcount.py" in z.namelist()

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-index", "--quiet", str(wheel)], timeout=120)
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                         "['purelib'])"]).stdout.strip())
    (site / "eos-test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("EOS_", "PYTEST_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    where = _run([str(python), "-c", "import eos_runtime; print(eos_runtime.__file__)"],
                 cwd=elsewhere, env=env).stdout.strip()
    assert where.startswith(str(site)), f"eos_runtime imported from {where}, not the wheel's"

    p = subprocess.run([str(venv / "bin" / "eos"), "demo", "--lines", "300"], cwd=elsewhere,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"eos demo from the wheel failed:\n{p.stdout}\n{p.stderr}"
    assert "verified:" in p.stdout
    assert (elsewhere / ".eos" / "demo").is_dir()
