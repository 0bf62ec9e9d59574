"""The user docs run as written (issue 11, "Done means"): docs/tutorial.md walked block by
block in a fresh directory through the ``eos`` command (its shown outputs compared),
every Python block of docs/api.md and README.md's example run in order, and the options
api.md lists for ``start_pipeline`` are the ones it takes."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


@dataclass
class Block:
    lang: str          # python | bash | text | ...
    code: str
    before: str        # the prose between the previous block and this one
    section: str       # the "## " heading it is under


def blocks(path: Path) -> list[Block]:
    out: list[Block] = []
    section, prose, code, lang = "", [], None, ""
    for line in path.read_text().splitlines():
        if code is None:
            if line.startswith("```"):
                lang, code = line[3:].strip(), []
            else:
                if line.startswith("## "):
                    section = line[3:].strip()
                prose.append(line)
        elif line.startswith("```"):
            out.append(Block(lang, "\n".join(code) + "\n", "\n".join(prose), section))
            code, prose = None, []
        else:
            code.append(line)
    assert code is None, f"{path.name}: a code block is not closed"
    return out


def file_name(block: Block) -> str | None:
    """``Save this as `NAME`:`` right before a block: the block is that file."""
    m = re.search(r"[Ss]ave this as `([^`]+)`:\s*$", block.before)
    return m.group(1) if m else None


def expected_output(blocks_: list[Block], i: int) -> str | None:
    """A text block right after a bash block (nothing between) is that block's stdout."""
    nxt = blocks_[i + 1] if i + 1 < len(blocks_) else None
    if nxt is not None and nxt.lang == "text" and not nxt.before.strip() \
            and file_name(nxt) is None:
        return nxt.code
    return None


# --------------------------------------------------------------------------- the tutorial

class Shell:
    """One user's shell across the tutorial's blocks: the directory and the exported
    variables carry from one block to the next; the venv is activated; nothing of this
    test session's Kafka settings leaks in (a newcomer's shell has none)."""

    def __init__(self, home: Path) -> None:
        self.cwd = home
        self.state = home.parent / f"{home.name}.shell"
        self.state.mkdir()
        bin_dir = Path(sys.executable).parent
        if not (bin_dir / "eos").exists():
            pytest.skip(f"no eos command beside {sys.executable} (the package is not installed)")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("EOS_", "PYTEST_", "VIRTUAL_ENV"))}
        self.env["PATH"] = f"{bin_dir}{os.pathsep}{self.env.get('PATH', '')}"
        self.env["VIRTUAL_ENV"] = str(bin_dir.parent)
        self.exports = self.state / "exports.sh"
        self.exports.write_text("")

    def run(self, code: str, timeout: float = 300) -> str:
        script = (f"set -euo pipefail\ncd {_q(self.cwd)}\n. {_q(self.exports)}\n{code}\n"
                  f"pwd > {_q(self.state / 'cwd')}\nexport -p > {_q(self.exports)}\n")
        p = subprocess.run(["bash", "-c", script], env=self.env, capture_output=True,
                           text=True, timeout=timeout)
        assert p.returncode == 0, f"this block failed:\n{code}\nstdout:\n{p.stdout}\n" \
                                  f"stderr:\n{p.stderr}"
        self.cwd = Path((self.state / "cwd").read_text().strip())
        return p.stdout


def _q(path: Path) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


def walk_tutorial(tmp_path: Path, sections: tuple[str, ...]) -> Shell:
    """Every file block written and every shell block of ``sections`` run, in order."""
    home = tmp_path / "user"
    home.mkdir()
    shell = Shell(home)
    doc = blocks(DOCS / "tutorial.md")
    for i, b in enumerate(doc):
        name = file_name(b)
        if name is not None:
            (shell.cwd / name).write_text(b.code)
            continue
        if b.lang != "bash" or not b.section.startswith(sections):
            continue
        if "pip install" in b.code:
            check_install_block(b.code)   # this test runs inside that very install
            continue
        out = shell.run(b.code)
        want = expected_output(doc, i)
        if want is not None:
            assert [line.split() for line in out.splitlines()] == \
                   [line.split() for line in want.splitlines()], \
                f"the output of\n{b.code}\ndiffers from the tutorial's:\n{out}"
    return shell


def check_install_block(code: str) -> None:
    assert 'pip install -e ".[dev]"' in code
    extras = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dev = \[[^\]]*"pytest', extras, re.M | re.S), "pytest in .[dev]"
    assert '-e ".[dev' in (ROOT / "scripts" / "bootstrap").read_text()


def test_the_tutorials_blocks_are_what_the_walk_expects():
    doc = blocks(DOCS / "tutorial.md")
    files = [file_name(b) for b in doc if file_name(b)]
    assert files == ["totals.py", "test_totals.py", "purchases.txt", "shops.py",
                     "customers.txt", "orders.txt", "views.py", "views.txt", "more-views.txt"]
    sections = {b.section.split(".")[0] for b in doc if b.lang == "bash"}
    assert sections == {"1", "3", "4", "5", "6", "7", "8"}
    assert sum(expected_output(doc, i) is not None for i in range(len(doc))) == 8


# Two walks, so that two workers share the longest test of the suite: chapters 7 and 8
# (a graph, event time) start from chapter 1's directory and need nothing of 2-5.
@pytest.mark.parametrize("chapters", [("1.", "2.", "3.", "4.", "5."), ("1.", "7.", "8.")],
                         ids=["chapters-1-5", "chapters-7-8"])
def test_the_tutorial_on_the_local_log(tmp_path, chapters):
    shell = walk_tutorial(tmp_path, chapters)
    assert (shell.cwd / ".eos" / "data").is_dir()
    assert shell.cwd.name == "totals"


@pytest.mark.kafka
@pytest.mark.slow
def test_the_tutorial_on_kafka(tmp_path):
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java")
    try:
        shell = walk_tutorial(tmp_path, ("1.", "6."))
    finally:   # the tutorial's own broker, whatever happened
        for run_dir in tmp_path.glob("user/**/.eos/kafka"):
            subprocess.run([str(Path(sys.executable).parent / "eos"), "kafka", "down",
                            "--dir", str(run_dir)], capture_output=True, timeout=120)
    assert not (shell.cwd / ".eos" / "data").exists(), "only Kafka was used"


# --------------------------------------------------------------------------- api.md, README

def run_python_blocks(path: Path, where: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.chdir(where)
    monkeypatch.delenv("EOS_BOOTSTRAP_SERVERS", raising=False)
    namespace: dict = {"__name__": "docs"}
    for b in blocks(path):
        if b.lang == "python":
            exec(compile(b.code, f"{path.name}:{b.section}", "exec"), namespace)
    return namespace


def test_every_python_block_of_api_md_runs(tmp_path, monkeypatch, capsys):
    # The secured-Kafka example reads its password from the environment, as it advises.
    monkeypatch.setenv("KAFKA_PASSWORD", "not-a-secret")
    ns = run_python_blocks(DOCS / "api.md", tmp_path, monkeypatch)
    printed = capsys.readouterr().out
    text = " ".join((DOCS / "api.md").read_text().split())
    for message in printed.strip().splitlines():   # the errors the page says it prints
        assert f"prints `{message}`" in text, message
    assert ns["summary"].stopped


def test_the_readme_example_runs(tmp_path, monkeypatch):
    readme = ROOT / "README.md"
    first = next(b for b in blocks(readme) if b.lang == "python")
    monkeypatch.chdir(tmp_path)
    exec(compile(first.code, "README.md", "exec"), {"__name__": "readme"})
    text = readme.read_text()
    assert "(docs/api.md)" in text and "(docs/tutorial.md)" in text


def test_api_md_lists_exactly_the_run_options():
    from eos_runtime import PipelineRun, RunSummary, run_pipeline, start_pipeline

    text = (DOCS / "api.md").read_text()
    table = text.split("### `start_pipeline(")[1].split("\n\n")[2]
    listed = re.findall(r"^\| `(\w+)` \|", table, re.M)
    takes = [n for n, p in inspect.signature(start_pipeline).parameters.items()
             if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert listed == takes, "api.md's start_pipeline options differ from its signature"
    own = [n for n, p in inspect.signature(run_pipeline).parameters.items()
           if p.kind is inspect.Parameter.KEYWORD_ONLY]
    heading = re.search(r"### `run_pipeline\((.*)\)`", text).group(1)
    assert re.findall(r"(\w+)=", heading) == own
    summary = text.split("`RunSummary`: ")[1].split("\n\n")[0]
    for f in fields(RunSummary):
        assert f"`{f.name}`" in summary, f"RunSummary.{f.name} is not in api.md"
    methods = text.split("`PipelineRun`: ")[1].split("\n\n")[0]
    for name, _ in inspect.getmembers(PipelineRun, inspect.isfunction):
        if not name.startswith("_"):
            assert f"`{name}(" in methods, f"PipelineRun.{name} is not in api.md"
