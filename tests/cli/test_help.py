"""One vocabulary on the command line: a flag letter means one thing in every command, and flags
print as flags. Walks every command (and sub-command) of the app and reads each one's --help."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from gpuwait.cli.main import app


def _commands(command, path: tuple[str, ...] = ()):
    # typer carries its own copy of click, so commands and options are told apart by duck typing
    yield path, command
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))


def test_every_flag_letter_has_one_meaning():
    meanings: dict[str, dict[str, list[str]]] = {}
    root = typer.main.get_command(app)
    runner = CliRunner()
    for path, command in _commands(root):
        result = runner.invoke(app, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0, (path, result.output)
        assert "<bool>" not in result.output, f"`gpuwait {' '.join(path)} --help` shows a flag as taking a value"
        for param in command.params:
            if param.param_type_name != "option":
                continue
            longs = sorted(o for o in param.opts if o.startswith("--"))
            for short in (o for o in param.opts if not o.startswith("--")):
                assert short in result.output, (path, short)
                meanings.setdefault(short, {}).setdefault(",".join(longs), []).append(" ".join(path) or "gpuwait")
    clashes = {letter: uses for letter, uses in meanings.items() if len(uses) > 1}
    assert not clashes, f"flag letters with two meanings: {clashes}"
    # perf keeps nccl-tests' letters (-b, -e, -f, -n, -g ...), so they mean what they mean there
    assert list(meanings["-n"]) == ["--iters"] and list(meanings["-f"]) == ["--stepfactor"]


def test_schema_prints_defaults_with_units():
    import json

    from gpuwait.cli.schema import with_units
    from gpuwait.spec import Scenario
    from gpuwait.units import parse_rate_Bps, parse_size_bytes, parse_time_s

    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0
    doc = json.loads(result.output)
    props = doc["$defs"]["ServerSpec"]["properties"]
    assert props["nic_speed"]["default"] == "400Gbps" and props["nvlink_bandwidth"]["default"] == "450GB/s"
    assert doc["$defs"]["ParallelSpec"]["properties"]["bucket"]["default"] == "25MiB"
    assert "50000000000.0" not in result.output
    # every text parses back to the value the model holds
    raw = Scenario.model_json_schema()
    for name, spec in raw["$defs"].items():
        for field, prop in spec.get("properties", {}).items():
            unit, default = prop.get("description_unit", ""), prop.get("default")
            shown = with_units(prop)["default"] if "default" in prop else None
            if isinstance(default, float) and isinstance(shown, str):
                parse = {"rate": parse_rate_Bps, "size": parse_size_bytes, "dura": parse_time_s}[unit[:4]]
                assert parse(shown, allow_zero=True) == default, (name, field, shown)


def _documented_command_lines():
    """Every `gpuwait ...` command line of the README, docs/*.md and examples/**/README.md (a shell
    prompt dropped, backslash continuations joined, cut at a pipe or redirect)."""
    import re
    import shlex
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted((root / "examples").rglob("README.md"))]:
        text = re.sub(r"\\\n\s*", " ", page.read_text())
        for match in re.finditer(r"(?:^|`|\$ )\s*(gpuwait [^`\n]*)", text, re.M):
            try:
                words = shlex.split(match.group(1), comments=True)
            except ValueError:
                continue
            for cut, word in enumerate(words):
                if word in ("|", ">", ">>", "&&", ";"):
                    words = words[:cut]
                    break
            yield page.relative_to(root), words[1:]


def test_documented_command_lines_use_options_the_commands_have():
    """examples/inventory/README.md wrote `inventory import ... -o FILE`: the command has --out, and
    -o is perf's --op, so the documented line failed with 'No such option: -o'."""
    root = typer.main.get_command(app)
    bad, lines = [], list(_documented_command_lines())
    assert len(lines) > 50
    for page, words in lines:
        command, rest = root, list(words)
        while rest and hasattr(command, "commands") and rest[0] in command.commands:
            command = command.commands[rest.pop(0)]
        if command is not root and hasattr(command, "commands") and "run" in command.commands:
            command = command.commands["run"]  # `gpuwait sweep SWEEP.yaml --out DIR` runs it
        if hasattr(command, "commands") and command is root:
            continue  # prose such as "gpuwait answers ..."
        # a hidden option is an old spelling kept for scripts: the docs show the current one
        opts = {o for p in command.params if not getattr(p, "hidden", False)
                for o in (*p.opts, *getattr(p, "secondary_opts", ()))} | {"--help"}
        for word in rest:
            flag = word.split("=")[0]
            if flag.startswith("-") and not flag.lstrip("-").replace(".", "").isdigit() and len(flag) > 1 \
                    and flag not in opts:
                bad.append((str(page), " ".join(words), flag))
    assert not bad, bad


def test_where_output_goes_is_spelled_out_everywhere():
    """calibrate, telemetry export and sweep wrote to --out, inventory import to --output: one spelling now.
    --output still works for one release, hidden, with a note."""
    root = typer.main.get_command(app)
    shown = {" ".join(path): {o for p in command.params if not getattr(p, "hidden", False) for o in p.opts}
             for path, command in _commands(root) if hasattr(command, "params")}
    assert not [path for path, opts in shown.items() if "--output" in opts], shown
    assert all("--out" in shown[c] for c in ("calibrate", "telemetry export", "sweep run", "inventory import"))
    assert "--output" not in CliRunner().invoke(app, ["inventory", "import", "--help"], terminal_width=200).output


def test_inventory_import_keeps_output_as_a_hidden_alias_of_out(capsys, tmp_path):
    from pathlib import Path

    from tests.cli.test_cli import run_cli

    links = Path(__file__).resolve().parents[1] / "data" / "inventory" / "links.yaml"
    new, old = tmp_path / "new.yaml", tmp_path / "old.yaml"
    assert run_cli(capsys, "inventory", "import", "--links", str(links), "--out", str(new))[0] == 0
    code, _, err = run_cli(capsys, "inventory", "import", "--links", str(links), "--output", str(old))
    assert code == 0 and old.read_text() == new.read_text()
    assert err.startswith("note: --output is now --out"), err
    code, _, err = run_cli(capsys, "inventory", "import", "--links", str(links), "--out", str(new), "--output", str(old))
    assert code == 2 and err.startswith("error: --output: the old spelling of --out; expected one of them, not both")


def test_every_command_that_prints_a_result_takes_json():
    """README said every command that prints results takes --json; telemetry export, sweep report and sweep
    compact did not. `schema` prints JSON Schema already, and README says so."""
    from pathlib import Path

    root = typer.main.get_command(app)
    without = sorted(" ".join(path) for path, command in _commands(root)
                     if not hasattr(command, "commands") and "--json" not in {o for p in command.params for o in p.opts})
    assert without == ["schema"]
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "Every command that prints results takes `--json` but `schema`, which prints JSON" in readme
