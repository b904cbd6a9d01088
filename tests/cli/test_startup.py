"""`gpuwait --help` answers fast: the CLI imports the engines, numpy, scipy and the scenario models
(pydantic) only inside a command's body. (typer itself may import pydantic, to support its types.)"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("numpy", "scipy", "numba", "pyarrow", "plotly", "gpuwait.engine", "gpuwait.spec", "gpuwait.topology")


def _loaded_after(code: str) -> list[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": ":".join(sys.path), "PATH": "/usr/bin:/bin", "COLUMNS": "120"})
    modules = json.loads(proc.stdout.splitlines()[-1])
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_importing_the_cli_loads_no_engine_numpy_or_scenario_models():
    assert _loaded_after("import gpuwait.cli.main") == []


def test_help_loads_no_engine_numpy_or_scenario_models():
    code = ("from gpuwait.cli.main import main\nimport contextlib, io\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    main(['--help'])\n    main(['run', '--help'])")
    assert _loaded_after(code) == []


def test_import_gpuwait_is_light_until_an_api_name_is_used():
    assert _loaded_after("import gpuwait") == []
    assert "numpy" in _loaded_after("import gpuwait\ngpuwait.load_scenario")
