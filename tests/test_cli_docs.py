"""docs/cli.md and ``eos --help`` are one truth (issue 11, item 6).

Every command of ``eos`` (found by click introspection, so a new command or option is
found too) has a section in docs/cli.md headed by its usage, e.g. ``## `eos run
PIPELINE.py` ``, whose options table lists exactly the command's options: each with the
value it takes (its metavar or choices; nothing for a flag), its default, and as its
meaning the option's ``--help`` text word for word. A trailing ``Default: ...`` sentence
of the help is the table's default; otherwise the default is click's own (``off`` for a
flag, ``none`` when there is none). The JSON of ``eos run --json`` is pinned to the
fields it has, and README's command table names only options that exist.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import click
import pytest

from eos_runtime.cli import main

ROOT = Path(__file__).resolve().parent.parent
CLI_MD = ROOT / "docs" / "cli.md"


def commands(group: click.Group = main, path: tuple[str, ...] = ()):
    """Every leaf command of ``eos``: (("kafka", "up"), command), (("run",), command), ..."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        if isinstance(cmd, click.Group):
            yield from commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]


def usage(path: tuple[str, ...], cmd: click.Command) -> str:
    """``eos run PIPELINE.py``: the command and its arguments as its usage line shows them."""
    args = [p.make_metavar(click.Context(cmd)) for p in cmd.params
            if isinstance(p, click.Argument)]
    return " ".join(["eos", *path, *args])


def _words(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    """A markdown table cell as plain text: no backticks, no escaped pipes."""
    return _words(text.replace("\\|", "|").replace("`", ""))


_DEFAULT = re.compile(r"^(?P<meaning>.*?)\s*Default: (?P<default>.*?)\.?$")


def expected_row(opt: click.Option) -> dict[str, str | None]:
    """What the docs' row of ``opt`` must say: name, value, default, meaning."""
    help_text = _cell(opt.help or "")
    default: str
    m = _DEFAULT.match(help_text)
    if m:
        meaning, default = m["meaning"], m["default"]
    else:
        meaning = help_text
        if opt.is_flag:
            default = "off"
        elif opt.default is None or opt.default is click.core.UNSET:
            default = "none"
        else:
            default = f"{opt.default:,}" if isinstance(opt.default, int) else str(opt.default)
    if opt.is_flag:
        value = ""
    elif isinstance(opt.type, click.Choice):
        value = "|".join(map(str, opt.type.choices))
    else:
        value = opt.metavar  # None: any placeholder will do
    return {"name": max(opt.opts, key=len), "value": value, "default": default,
            "meaning": meaning}


def sections(text: str) -> dict[str, str]:
    """The docs' sections by the usage in their heading: {"eos run PIPELINE.py": body}."""
    found = {}
    parts = re.split(r"^(#{2,3}) `(eos[^`]*)`[^\n]*\n", text, flags=re.M)
    for i in range(1, len(parts), 3):
        found[_cell(parts[i + 1])] = re.split(r"^#{1,3} ", parts[i + 2], flags=re.M)[0]
    return found


def doc_rows(body: str) -> dict[str, dict[str, str]]:
    """The rows of a section's options table (the table whose header starts with
    ``| option |``): {"--guarantee": {"value", "default", "meaning"}}."""
    rows: dict[str, dict[str, str]] = {}
    in_table = False
    for line in body.splitlines():
        if line.startswith("| option |"):
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if not in_table or line.startswith("|---"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        assert len(cells) == 3, f"an options row has option | default | meaning: {line}"
        option = _cell(cells[0])
        name, _, value = option.partition(" ")
        assert name not in rows, f"{name} is listed twice"
        rows[name] = {"value": value, "default": _cell(cells[1]), "meaning": _cell(cells[2])}
    return rows


DOC_SECTIONS = sections(CLI_MD.read_text())
COMMANDS = list(commands())


def test_every_command_has_a_section():
    assert COMMANDS, "no commands found"
    missing = [usage(p, c) for p, c in COMMANDS if usage(p, c) not in DOC_SECTIONS]
    assert not missing, f"docs/cli.md has no section headed by: {missing}"
    extra = set(DOC_SECTIONS) - {usage(p, c) for p, c in COMMANDS}
    assert not extra, f"docs/cli.md documents commands eos does not have: {sorted(extra)}"


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_the_docs_list_every_option_as_its_help_says(path, cmd):
    body = DOC_SECTIONS.get(usage(path, cmd))
    if body is None:
        pytest.fail(f"docs/cli.md has no section for {usage(path, cmd)!r}")
    documented = doc_rows(body)
    wanted = {row["name"]: row for row in map(expected_row, options(cmd))}
    assert sorted(documented) == sorted(wanted), \
        f"{usage(path, cmd)}: docs/cli.md lists {sorted(documented)}, eos has {sorted(wanted)}"
    for name, want in wanted.items():
        got = documented[name]
        where = f"{' '.join(path)} {name}"
        if want["value"] is None:
            assert got["value"], f"{where}: the docs show no value, but the option takes one"
        else:
            assert got["value"] == want["value"], f"{where}: value {got['value']!r} in the " \
                                                  f"docs, {want['value']!r} in the CLI"
        assert got["default"] == want["default"], f"{where}: default {got['default']!r} in " \
                                                  f"the docs, {want['default']!r} in --help"
        assert got["meaning"] == want["meaning"], f"{where}: the docs say\n  {got['meaning']}" \
                                                  f"\n--help says\n  {want['meaning']}"


def test_the_checker_sees_a_disagreement():
    # The old --commit-every: docs and --help agreed on N >= 1, the pipeline's 0 (off) was
    # out of reach; a row that still says so no longer matches the option.
    opt = click.Option(["--commit-every"], type=click.IntRange(0), metavar="N",
                       help="Also checkpoint after N records. Default: the pipeline's.")
    row = expected_row(opt)
    assert row == {"name": "--commit-every", "value": "N", "default": "the pipeline's",
                   "meaning": "Also checkpoint after N records."}
    body = ("| option | default | meaning |\n|---|---|---|\n"
            "| `--commit-every N` | the pipeline's | also checkpoint after N records |\n")
    assert doc_rows(body)["--commit-every"]["meaning"] != row["meaning"]
    flag = expected_row(click.Option(["--json", "as_json"], is_flag=True, help="JSON."))
    assert (flag["value"], flag["default"]) == ("", "off")


# --------------------------------------------------------------------------- eos run --json

def _json_fields(body: str, table: str) -> list[str]:
    """The field names of the docs' table headed ``| <table> | meaning |``."""
    names, in_table = [], False
    for line in body.splitlines():
        if line.startswith(f"| {table} |"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            names += re.findall(r"`(\w+)`", line.split("|")[1])
    return names


def test_the_run_summary_json_fields_are_documented(tmp_path):
    from eos_runtime import Pipeline
    from eos_runtime.plan import describe_plan, plan_job
    from eos_runtime.runner import RunSummary
    from eos_runtime.runtime.task import TaskStats
    from eos_runtime.transport import TopicSpec, open_transport

    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec("lines", 2)])
        p = Pipeline("wc")
        p.source("lines").flat_map(str.split).key_by(str).sink("counts")
        plan = describe_plan(plan_job(p, t))
    task = TaskStats(0).as_dict()
    summary = RunSummary("wc", "exactly-once", "local", 1.0, 10, [task], plan).as_dict()
    body = DOC_SECTIONS["eos run PIPELINE.py"]
    assert _json_fields(body, "field") == list(summary), "the summary's fields"
    assert _json_fields(body, "stages[]") == list(summary["stages"][0])
    assert _json_fields(body, "plan[]") == list(summary["plan"][0])
    assert _json_fields(body, "tasks[]") == [f.name for f in dataclasses.fields(TaskStats)]


# --------------------------------------------------------------------------- README

def test_readme_names_only_options_the_commands_have():
    text = (ROOT / "README.md").read_text()
    by_path = {" ".join(p): {n for o in options(c) for n in o.opts} for p, c in COMMANDS}
    rows = re.findall(r"^\| `(eos [^|]*(?:\\\|[^|]*)*)` \|(.*)$", text, re.M)
    assert rows, "README.md has no command table"
    for cell, what in rows:
        words = re.match(r"eos ([a-z]+(?: [a-z]+)?)", cell)[1].split()
        name = " ".join(words if " ".join(words) in by_path else words[:1])
        assert name in by_path, f"README names a command eos does not have: {cell}"
        unknown = set(re.findall(r"(--[a-z][a-z-]*)", cell + what)) - by_path[name]
        assert not unknown, f"README: eos {name} has no {sorted(unknown)}"


def test_loading_every_command_keeps_the_entry_point() -> None:
    """Commands load on first use; a command module named like the package's ``run``
    (the console entry point) replaced it once loaded, and the next in-process ``run()``
    called a module."""
    import eos_runtime.cli as cli

    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        assert main.get_command(ctx, name) is not None, name
    assert callable(cli.run) and cli.run.__module__ == "eos_runtime.cli"
