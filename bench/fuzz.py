"""Fuzz gpuwait's inputs: mutated scenario files, command lines, telemetry files, sweep files,
cluster inventories (ibnetdiscover, Slurm topology.conf, lldpctl JSON, NCCL topology XML, node/link
files) and multi-job inputs (scenarios with ``jobs:``, job traces).

Every case runs the CLI (``gpuwait.cli.main.main``) in a forked child of a process that has already
imported gpuwait, under a memory limit (``RLIMIT_AS``) and a wall-clock timeout, in its own temporary
directory. Each outcome falls in one class:

- ``traceback``: an exception other than a one-line :class:`~gpuwait.errors.GpuwaitError` escaped,
  or a Python traceback reached stderr;
- ``hang``: the case ran past the timeout;
- ``memory``: a MemoryError, or the child died under the memory limit;
- ``accepted``: an input the generator made invalid on purpose (duplicate key, not UTF-8, a count
  past its bound, ...) exited 0;
- ``long error``: the error ran past two lines (error + hint) or one line past 2,100 characters;
- ``ok``: anything else (a clear error, or a valid input that ran).

Run ``python bench/fuzz.py --cases 2000 --seed 1`` (add ``--write-doc`` to refresh
docs/reliability.md). The suite runs a small hypothesis-driven share of the same cases
(tests/cli/test_fuzz.py).
"""

from __future__ import annotations

import argparse
import copy
import io
import os
import random
import re
import resource
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TELEMETRY_DATA = ROOT / "tests" / "telemetry" / "data"
NCCL_LOGS = ROOT / "tests" / "nccltests" / "data" / "reference"
INVENTORY_DATA = ROOT / "tests" / "data" / "inventory"
TRACES = ROOT / "tests" / "data" / "traces"
#: a sweep small enough to run in seconds: 2 servers, 2 cases
TINY_SWEEP = {
    "name": "tiny",
    "base": {"name": "dp", "cluster": {"preset": "rocev2-400g-2tier", "servers": 2},
             "workload": {"model": {"preset": "llama-8b", "seq_len": 2048},
                          "parallel": {"tp": 8, "pp": 1, "micro_batch": 1, "global_batch": 16}}},
    "steps": 1,
    "axes": [{"path": "cluster.routing.kind", "values": ["ecmp", "adaptive"], "name": "routing"},
             {"path": "cluster.fabric.oversubscription", "values": [1]}],
    "exclude": [{"cluster.routing.kind": "adaptive", "cluster.fabric.oversubscription": 2}],
}
CLASSES = ("traceback", "hang", "memory", "accepted", "long error")
#: examples small enough to `run` in well under a second each
FAST_EXAMPLES = ("dp-only.yaml", "ecmp-collision.yaml", "oversubscribed-all-to-all.yaml")


@dataclass
class Case:
    """One command line with the files it reads; ``invalid`` marks inputs that must not exit 0."""

    group: str
    label: str
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    invalid: bool = False


@dataclass
class Outcome:
    case: Case
    kind: str
    code: int
    seconds: float
    stderr: str


# ----------------------------------------------------------------------------------------------
# the nasty values and the mutations

def nasty_values(rng: random.Random) -> list[tuple[object, bool]]:
    """(value, surely invalid for a count field) pairs."""
    return [
        (10 ** 9, True), (10 ** 12, True), (-1, True), (0, False), (10 ** 3000, True), (1e400, True),
        (float("nan"), False), ("[/]", False), ("\x1b[2J\x1b[31mred", False), ("", False), ("x" * 100_000, False),
        ([1, 2, 3], False), ({"a": 1}, False), (None, False), (True, False), (3.5, False), ("1e400", False),
        ("\u202e\u0000name", False), (rng.randint(-5, 5), False),
    ]


def _paths(data, prefix=()):
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _paths(v, (*prefix, i))
    yield prefix


def _set(data, path, value):
    node = data
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


COUNT_FIELDS = ("global_batch", "steps", "storage_nics", "storage_servers", "servers", "micro_batch", "tp", "pp")


def mutate_tree(data, rng: random.Random) -> tuple[object, str, bool]:
    data = copy.deepcopy(data)
    paths = [p for p in _paths(data) if p]
    path = rng.choice(paths)
    op = rng.random()
    if op < 0.55:
        value, bad = rng.choice(nasty_values(rng))
        counted = isinstance(path[-1], str) and path[-1] in COUNT_FIELDS
        _set(data, path, value)
        return data, f"set {'.'.join(map(str, path))}={str(value)[:20]!r}", bad and counted
    if op < 0.7:
        node = data
        for p in path[:-1]:
            node = node[p]
        if isinstance(node, dict):
            del node[path[-1]]
        return data, f"delete {'.'.join(map(str, path))}", False
    if op < 0.85 and isinstance(data, dict):
        key = rng.choice(COUNT_FIELDS)
        target = data.get("workload", {}).get("parallel") if key in ("global_batch", "micro_batch", "tp", "pp") else None
        if key == "steps" and isinstance(data.get("workload"), dict):
            target = data["workload"]
        if key in ("servers", "storage_nics", "storage_servers") and isinstance(data.get("cluster"), dict):
            target = data["cluster"]
        if isinstance(target, dict):
            target[key] = rng.choice([10 ** 9, 10 ** 7, 2 ** 40, -3])
            return data, f"count {key}={target[key]}", True
    node = data
    for p in path[:-1]:
        node = node[p]
    if isinstance(node, dict):
        node["no_such_field"] = 1
        return data, "unknown key", True
    return data, "unchanged", False


def _yaml_bytes(data) -> bytes:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode("utf-8")


def byte_mutation(text: bytes, rng: random.Random) -> tuple[bytes, str, bool]:
    """Mutations of the file as bytes: the classes a YAML loader must refuse or survive."""
    choice = rng.randrange(9)
    if choice == 0:
        return b"", "empty file", True
    if choice == 1:
        at = rng.randrange(len(text))
        return text[:at] + b"\xff\xfe\x80" + text[at:], "not UTF-8", True
    if choice == 2:
        depth = rng.choice([200, 2000, 20000])
        return b"name: x\nextra: " + b"[" * depth + b"]" * depth + b"\n", f"nesting {depth}", True
    if choice == 3:
        bomb = b"a: &a [x,x,x,x,x,x,x,x,x]\n" + b"".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
            f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n".encode() for i in range(8))
        return bomb, "alias bomb", True
    if choice == 4:
        lines = text.splitlines(keepends=True)
        top = [ln for ln in lines if ln[:1].isalpha()]
        return text + (top[0] if top else b"name: x\n"), "duplicate key", True
    if choice == 5:
        at = rng.randrange(len(text))
        return text[:at], f"truncated at {at}", False
    if choice == 6:
        return b"name: " + b"9" * 5000 + b"\n", "5000-digit integer", True
    if choice == 7:
        return text.replace(b"name: ", b"name: \"[/]\\e[2J\" #", 1), "markup name", False
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))), "random bytes", True


def scenario_case(rng: random.Random, examples: dict[str, bytes]) -> Case:
    name = rng.choice(sorted(examples))
    text = examples[name]
    if rng.random() < 0.45:
        body, label, invalid = byte_mutation(text, rng)
    else:
        data, label, invalid = mutate_tree(yaml.safe_load(text), rng)
        try:
            body = _yaml_bytes(data)
        except (ValueError, OverflowError, yaml.YAMLError):
            body, label = text, "unchanged"
    fast = name in FAST_EXAMPLES
    cmd = rng.choices(["validate", "validate --json", "run", "telemetry"], [6, 2, 3 if fast else 0, 1 if fast else 0])[0]
    argv = {"validate": ["validate", "s.yaml"], "validate --json": ["validate", "--json", "s.yaml"],
            "run": ["run", "s.yaml"], "telemetry": ["telemetry", "export", "s.yaml", "--out", "t.prom"]}[cmd]
    return Case("scenario", f"{cmd} {name}: {label}", argv, {"s.yaml": body}, invalid)


def cli_case(rng: random.Random) -> Case:
    """Command lines: perf sizes and counts, output paths, odd inputs."""
    big = rng.choice(["1e400", "99999999999999999999G", "-5", "0", "abc", "8", "1G", "1" * 400, "1e3"])
    choice = rng.randrange(8)
    if choice == 0:
        return Case("cli", f"perf -b {big}", ["perf", "all_reduce", "-b", big, "-e", "1M", "-f", "2"],
                    invalid=big in ("-5", "abc", "1e400", "99999999999999999999G") or len(big) > 100)
    if choice == 1:
        n = rng.choice([10 ** 9, 10 ** 6, 100_000, 2 ** 63, 1])
        flag = rng.choice(["-r", "-n", "-w", "--servers", "-g", "-f"])
        return Case("cli", f"perf {flag} {n}", ["perf", "broadcast", "-b", "8", "-e", "64", flag, str(n)],
                    invalid=n >= 10 ** 6 and flag in ("-r", "--servers", "-g"))
    if choice == 2:
        target = rng.choice(["", "exists.txt", "exists.txt/sub", "/proc/nope", "x" * 100_000, "ro/out", "out"])
        return Case("cli", f"run --report {target[:20]!r}", ["run", "s.yaml", "--report", target],
                    {"s.yaml": (EXAMPLES / "dp-only.yaml").read_bytes(), "exists.txt": b"x"},
                    invalid=target != "out" and not (target == "ro/out" and os.geteuid() == 0))  # root writes anywhere
    if choice == 3:
        target = rng.choice(["", ".", "exists.txt/sub", "/proc/nope/x", "x" * 100_000, "d/"])
        return Case("cli", f"telemetry export --out {target[:20]!r}",
                    ["telemetry", "export", "s.yaml", "--out", target],
                    {"s.yaml": (EXAMPLES / "dp-only.yaml").read_bytes(), "exists.txt": b"x"}, invalid=True)
    if choice == 4:
        src = rng.choice(["/dev/zero", "/dev/null", ".", "missing.yaml"])
        cmd = rng.choice([["validate", src], ["run", src], ["perf", "all_reduce", "--cluster", src],
                          ["perf", "all_reduce", "--compare", src]])
        return Case("cli", " ".join(cmd), cmd, invalid=True)
    if choice == 5:
        n = rng.choice([100_001, 10 ** 7, 0, -1])
        return Case("cli", f"validate --servers {n}", ["perf", "all_reduce", "-b", "8", "-e", "8", "--servers", str(n)],
                    invalid=True)
    if choice == 6:
        steps = rng.choice([10 ** 9, 10 ** 6, 0])
        return Case("cli", f"run --steps {steps}", ["run", "s.yaml", "--steps", str(steps)],
                    {"s.yaml": (EXAMPLES / "dp-only.yaml").read_bytes()}, invalid=True)
    env = rng.choice(["NCCL_ALGO=[/]", "NCCL_NTHREADS=99999999999999999999", "=", "NCCL_PROTO=\x1b[2J", "X"])
    return Case("cli", f"perf --env {env[:20]!r}", ["perf", "all_reduce", "-b", "8", "-e", "8", "--env", env])


def line_mutation(text: bytes, rng: random.Random) -> tuple[bytes, str]:
    lines = text.splitlines(keepends=True) or [b"\n"]
    i = rng.randrange(len(lines))
    choice = rng.randrange(7)
    if choice == 0:
        lines[i] = b"x" * 200_000 + b" " + lines[i]
        return b"".join(lines), "200 KB line"
    if choice == 1:
        lines[i] = lines[i].replace(b".", b"0.00", 1)
        import re

        lines = [re.sub(rb"(\s)\d+\.\d+(\s)", rb"\g<1>0.00\g<2>", ln) for ln in lines]
        return b"".join(lines), "times 0.00"
    if choice == 2:
        lines[i] = b"\xff\xfe garbage \x00\n"
        return b"".join(lines), "binary line"
    if choice == 3:
        del lines[i]
        return b"".join(lines), "line deleted"
    if choice == 4:
        lines.insert(i, lines[i])
        return b"".join(lines), "line repeated"
    if choice == 5:
        lines[i] = lines[i].replace(b" ", b" " * 5000)
        return b"".join(lines), "spaces widened"
    return (b"".join(lines[:i]) + b" ".join([b"-1e999", b"nan", b"inf", b"9" * 400]) + b"\n" + b"".join(lines[i:]),
            "nasty numbers")


def _parquet_variant(rng: random.Random) -> tuple[bytes, str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    choice = rng.randrange(4)
    if choice == 0:
        table = pa.table({"name": [1, 2], "labels": ["a", "b"], "value": ["x", "y"], "timestamp_s": [None, "z"]})
        label = "wrong column types"
    elif choice == 1:
        table = pa.table({"name": pa.array([None, "m"], pa.string()),
                          "labels": pa.array([None, [("a", "b")]], pa.map_(pa.string(), pa.string())),
                          "value": pa.array([None, 1.0]), "timestamp_s": pa.array([None, None], pa.float64())})
        label = "nulls"
    else:
        table = pa.table({"name": ["m"], "labels": pa.array([[("a", "b")]], pa.map_(pa.string(), pa.string())),
                          "value": [1.0], "timestamp_s": [1.0]})
        meta = b"{not json" if choice == 2 else b'{"m": 5}'
        table = table.replace_schema_metadata({b"gpuwait.metric_info": meta})
        label = "bad metadata JSON" if choice == 2 else "metadata of the wrong shape"
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue(), label


def telemetry_case(rng: random.Random, telemetry: dict[str, bytes], logs: dict[str, bytes]) -> Case:
    if rng.random() < 0.35:
        name = rng.choice(sorted(logs))
        body, label = line_mutation(logs[name], rng)
        return Case("telemetry", f"perf --compare {name}: {label}",
                    ["perf", "all_reduce", "--cluster", "dgx-h100", "--compare", "log.txt"], {"log.txt": body})
    files = {f"t/{k}": v for k, v in rng.sample(sorted(telemetry.items()), 3)}
    target = rng.choice(sorted(files))
    if rng.random() < 0.25:
        body, label = _parquet_variant(rng)
        files[target.rsplit(".", 1)[0] + ".parquet"] = body
    else:
        files[target], label = line_mutation(files[target], rng)
    return Case("telemetry", f"diagnose --telemetry ({target}: {label})",
                ["diagnose", "--telemetry", "t", "--cluster", "rocev2-400g-2tier", "--servers", "2"], files)


def sweep_case(rng: random.Random) -> Case:
    """A small sweep file, mutated as a tree (axes, values, excludes, the base scenario) or as bytes,
    or with axes whose product is far past what a sweep may plan."""
    data = copy.deepcopy(TINY_SWEEP)
    r = rng.random()
    if r < 0.3:
        body, label, invalid = byte_mutation(_yaml_bytes(data), rng)
    elif r < 0.45:
        choice = rng.randrange(5)
        if choice == 0:  # 10 axes of 10 values: 10^10 cases
            data["axes"] = [{"path": "cluster.servers", "values": list(range(2, 12)), "name": f"a{k}"} for k in range(10)]
            label = "10^10 cases"
        elif choice == 1:
            data["axes"][0]["path"] = rng.choice(["cluster.nope", "", "..", "cluster.routing.kind.x", "base", "axes.0"])
            label = f"axis path {data['axes'][0]['path']!r}"
        elif choice == 2:
            data["axes"][0]["values"] = rng.choice([[], None, "ecmp", [[1]], [{"a": 1}]])
            label = f"axis values {str(data['axes'][0]['values'])[:20]}"
        elif choice == 3:
            data["axes"].append(dict(data["axes"][0]))
            label = "axis twice"
        else:
            data["exclude"] = rng.choice([[{"cluster.nope": 1}], "x", [1], [{}]])
            label = f"exclude {str(data['exclude'])[:20]}"
        body, invalid = _yaml_bytes(data), True
    else:
        data, label, invalid = mutate_tree(data, rng)
        try:
            body = _yaml_bytes(data)
        except (ValueError, OverflowError, yaml.YAMLError):
            body, label = _yaml_bytes(TINY_SWEEP), "unchanged"
    return Case("sweep", f"sweep run: {label}", ["sweep", "run", "s.yaml", "--out", "out", "--workers", "1"],
                {"s.yaml": body}, invalid)


def _text_mutation(text: bytes, rng: random.Random) -> tuple[bytes, str, bool]:
    """A line mutation (survivable), or bytes no reader may accept (empty, not UTF-8, random)."""
    r = rng.random()
    if r < 0.7:
        body, label = line_mutation(text, rng)
        return body, label, False
    if r < 0.8:
        return b"", "empty file", True
    if r < 0.9:
        at = rng.randrange(max(len(text), 1))
        return text[:at] + b"\xff\xfe\x80" + text[at:], "not UTF-8", True
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))), "random bytes", True


def inventory_case(rng: random.Random, inventory: dict[str, bytes]) -> Case:
    """`gpuwait inventory import` on mutated real samples: ibnetdiscover (with its GUID map), Slurm
    topology.conf, lldpctl JSON, NCCL topology XML and the explicit node/link files."""
    source = rng.choice(["ibnetdiscover", "map", "slurm", "links.csv", "links.yaml", "lldp", "nccl-topo", "options"])
    files = {"x5.ibnetdiscover": inventory["x5.ibnetdiscover"]}
    argv = ["inventory", "import", "--ibnetdiscover", "x5.ibnetdiscover"]
    target = "x5.ibnetdiscover"
    if source == "map":
        files["x5.map"], target = inventory["x5.map"], "x5.map"
        argv += ["--node-name-map", "x5.map"]
    elif source == "slurm":
        files, target, argv = {"topology.conf": inventory["x5-topology.conf"]}, "topology.conf", [
            "inventory", "import", "--slurm", "topology.conf"]
    elif source in ("links.csv", "links.yaml"):
        files, target, argv = {source: inventory[source]}, source, ["inventory", "import", "--links", source]
    elif source == "lldp":
        files = {f"lldp/{k.split('/', 1)[1]}": v for k, v in inventory.items() if k.startswith("lldp/")}
        target = rng.choice(sorted(files))
        argv = ["inventory", "import", "--lldp", "lldp"]
    elif source == "nccl-topo":
        files = {**{f"lldp/{k.split('/', 1)[1]}": v for k, v in inventory.items() if k.startswith("lldp/")},
                 "topo.xml": inventory[rng.choice(["nccl-topo-h200/fs-207.xml", "nccl-topo-p4de/p4de-24xl-topo.xml"])]}
        target, argv = "topo.xml", ["inventory", "import", "--lldp", "lldp", "--nccl-topo", "topo.xml"]
    elif source == "options":
        flag, value = rng.choice([("--hosts", "["), ("--hosts", "x" * 10_000), ("--hosts", "nothing-matches*"),
                                  ("--server-template", "no-such-template"), ("--server-template", "\x1b[2J"),
                                  ("--name", ""), ("--name", "\u202e" * 50), ("--node-name-map", "missing.map")])
        return Case("inventory", f"inventory import {flag} {value[:20]!r}", [*argv, flag, value, "--out", "c.yaml"],
                    files, invalid=value not in ("", "\u202e" * 50))
    invalid = False
    label = "unchanged"
    if target.endswith((".json", ".yaml")) and rng.random() < 0.5:
        import json

        loader = json.loads if target.endswith(".json") else yaml.safe_load
        data, label, _ = mutate_tree(loader(files[target]), rng)
        try:
            files[target] = (json.dumps(data).encode() if target.endswith(".json") else _yaml_bytes(data))
        except (ValueError, OverflowError, yaml.YAMLError):
            label = "unchanged"
    else:
        files[target], label, invalid = _text_mutation(files[target], rng)
        invalid = invalid and not (target == "x5.map" and label == "empty file")  # an empty map renames nothing
    return Case("inventory", f"inventory import ({target}: {label})", [*argv, "--out", "c.yaml"], files, invalid)


def jobs_case(rng: random.Random, jobs_scenario: bytes, traces: dict[str, bytes]) -> Case:
    """Multi-job inputs: a scenario with ``jobs:`` (names, servers, placements) for validate, place and
    schedule, and job traces (Helios, PAI, Acme, Lingjun CSV) for schedule."""
    if rng.random() < 0.3:
        name = rng.choice(sorted(traces))
        body, label, invalid = _text_mutation(traces[name], rng)
        files = {name: body}
        if name == "lingjun/worker-sample.csv":
            files["lingjun/topo.csv"] = traces["lingjun/topo.csv"]
        return Case("jobs", f"schedule {name}: {label}",
                    ["schedule", name, "--cluster", "rocev2-400g-2tier", "--servers", "16"], files, invalid)
    data = yaml.safe_load(jobs_scenario)
    r = rng.random()
    if r < 0.5:
        job = rng.choice(data["jobs"])
        choice = rng.randrange(6)
        invalid = True
        if choice == 0:
            job["placement"] = rng.choice([[0, 0, 1, 1, 2, 2, 3, 3], [-1] * 8, [10 ** 9] * 8, [0], "all", [[0]]])
            label = f"placement {str(job['placement'])[:20]}"
        elif choice == 1:
            job["servers"] = rng.choice([0, -1, 10 ** 9, 17, "8"])
            label, invalid = f"servers {job['servers']!r}", job["servers"] != "8"
        elif choice == 2:
            data["jobs"][1]["name"] = data["jobs"][0]["name"]
            label = "two jobs of one name"
        elif choice == 3:
            data["jobs"] = rng.choice([[], None, {}, "a"])
            label, invalid = f"jobs {data['jobs']!r}", data["jobs"] != []  # [] is the default: no jobs
        elif choice == 4:
            data["jobs"][1]["placement"] = list(data["jobs"][0]["placement"])
            label = "two jobs on the same servers"
        else:  # more jobs than the cluster holds at once, none placed: a queue, valid
            data["jobs"] = [{**data["jobs"][0], "name": f"j{k}"} for k in range(rng.choice([20, 50]))]
            for j in data["jobs"]:
                j.pop("placement", None)
            label, invalid = f"{len(data['jobs'])} jobs", False
        body = _yaml_bytes(data)
    elif r < 0.75:
        data, label, invalid = mutate_tree(data, rng)
        try:
            body = _yaml_bytes(data)
        except (ValueError, OverflowError, yaml.YAMLError):
            body, label = jobs_scenario, "unchanged"
    else:
        body, label, invalid = byte_mutation(jobs_scenario, rng)
    cmd = rng.choices([["validate", "s.yaml"], ["place", "s.yaml"], ["schedule", "s.yaml"]], [5, 2, 2])[0]
    if label.endswith(" jobs"):  # a queue: `schedule` runs it, `run` (so `validate`) and `place` need them all at once
        invalid = cmd[0] != "schedule"
    if cmd[0] == "schedule" and (label.startswith("placement") or label == "two jobs on the same servers"):
        invalid = False  # schedule places every job by its --policy; a job's own placement is not read
    return Case("jobs", f"{cmd[0]} jobs: {label}", cmd, {"s.yaml": body}, invalid)


def make_cases(n: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    examples = {p.name: p.read_bytes() for p in sorted(EXAMPLES.glob("*.yaml"))}
    telemetry = {p.name: p.read_bytes() for p in sorted(TELEMETRY_DATA.iterdir())}
    logs = {p.name: p.read_bytes() for p in sorted(NCCL_LOGS.glob("*.log"))}
    inventory = {p.relative_to(INVENTORY_DATA).as_posix(): p.read_bytes() for p in sorted(INVENTORY_DATA.rglob("*"))
                 if p.is_file()}
    traces = {p.relative_to(TRACES).as_posix(): p.read_bytes() for p in sorted(TRACES.rglob("*.csv"))}
    jobs_scenario = (EXAMPLES / "two-jobs-shared-uplinks.yaml").read_bytes()
    cases = []
    for _ in range(n):
        r = rng.random()
        if r < 0.4:
            cases.append(scenario_case(rng, examples))
        elif r < 0.55:
            cases.append(cli_case(rng))
        elif r < 0.7:
            cases.append(telemetry_case(rng, telemetry, logs))
        elif r < 0.8:
            cases.append(sweep_case(rng))
        elif r < 0.9:
            cases.append(inventory_case(rng, inventory))
        else:
            cases.append(jobs_case(rng, jobs_scenario, traces))
    return cases


# ----------------------------------------------------------------------------------------------
# running one case in a forked child

def _child(case: Case, workdir: str, mem_bytes: int) -> None:
    main = sys.modules.get("__main__")
    if getattr(main, "__file__", None):  # a sweep's spawned workers re-import the main script: keep its path valid
        main.__file__ = os.path.abspath(main.__file__)
    os.chdir(workdir)
    for name, body in case.files.items():
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        Path(name).write_bytes(body)
    os.makedirs("ro", exist_ok=True)
    os.chmod("ro", 0o500)
    out = os.open("stdout", os.O_WRONLY | os.O_CREAT, 0o600)
    err = os.open("stderr", os.O_WRONLY | os.O_CREAT, 0o600)
    os.dup2(out, 1)
    os.dup2(err, 2)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8", errors="backslashreplace")
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), encoding="utf-8", errors="backslashreplace")
    resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    code = 70
    try:
        from gpuwait.cli.main import main

        code = main(case.argv)
    except MemoryError:
        code = 71
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    except BaseException:  # noqa: BLE001 - exactly what the fuzzer counts
        traceback.print_exc()
        code = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(code if 0 <= code < 70 else 70)


def _vm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def run_case(case: Case, timeout_s: float = 20.0, extra_mem_bytes: int = 2 << 30) -> Outcome:
    """Run ``case`` in a forked child under ``RLIMIT_AS`` = this process's size + ``extra_mem_bytes``."""
    with tempfile.TemporaryDirectory(prefix="gpuwait-fuzz-") as workdir:
        mem = _vm_bytes() + extra_mem_bytes
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            try:
                _child(case, workdir, mem)
            finally:
                os._exit(70)
        status = None
        while time.perf_counter() - start < timeout_s:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.005)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = None  # the last WNOHANG poll's 0 would read as a clean exit: a hang counted as ok
        seconds = time.perf_counter() - start
        stderr = Path(workdir, "stderr").read_text(errors="replace") if Path(workdir, "stderr").exists() else ""
        os.chmod(Path(workdir, "ro"), 0o700) if Path(workdir, "ro").exists() else None
    if status is None:
        return Outcome(case, "hang", -1, seconds, stderr)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return Outcome(case, "memory" if sig in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT) else "traceback",
                       -sig, seconds, stderr)
    code = os.WEXITSTATUS(status)
    return Outcome(case, classify(case, code, stderr), code, seconds, stderr)


def classify(case: Case, code: int, stderr: str) -> str:
    if code == 71 or "MemoryError" in stderr:
        return "memory"
    if code == 70 or "Traceback (most recent call last)" in stderr:
        return "traceback"
    if code == 0:
        return "accepted" if case.invalid else "ok"
    # progress lines ("  2/2 cases" of a sweep) are not part of the error
    lines = [ln for ln in stderr.rstrip("\n").splitlines() if not re.match(r"^\s*\d+/\d+ cases$", ln)]
    if len(lines) > 2 or any(len(ln) > 2100 for ln in lines):
        return "long error"
    return "ok"


def _preload() -> None:
    """Import what the commands import, once, so each forked case starts in milliseconds."""
    import gpuwait.cli.main  # noqa: F401
    import gpuwait.report.diagnosis  # noqa: F401
    import gpuwait.report.files  # noqa: F401
    import gpuwait.report.perf  # noqa: F401
    import gpuwait.runner.inputs  # noqa: F401
    import gpuwait.runner.perf  # noqa: F401
    import gpuwait.runner.traffic  # noqa: F401
    import gpuwait.telemetry.bundle  # noqa: F401


def summarize(outcomes: list[Outcome]) -> str:
    groups = sorted({o.case.group for o in outcomes})
    head = "| group | cases | " + " | ".join(CLASSES) + " | slowest (s) |"
    rows = [head, "|" + "---|" * (len(CLASSES) + 3)]
    for g in [*groups, "all"]:
        sel = [o for o in outcomes if g in ("all", o.case.group)]
        counts = Counter(o.kind for o in sel)
        rows.append(f"| {g} | {len(sel)} | " + " | ".join(str(counts.get(c, 0)) for c in CLASSES)
                    + f" | {max(o.seconds for o in sel):.1f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--write-doc", action="store_true", help="refresh the table in docs/reliability.md")
    parser.add_argument("--show", type=int, default=3, help="failures shown per class")
    args = parser.parse_args(argv)
    _preload()
    cases = make_cases(args.cases, args.seed)
    start = time.perf_counter()
    outcomes = []
    for i, case in enumerate(cases):
        outcomes.append(run_case(case, args.timeout))
        if (i + 1) % 200 == 0:
            print(f"{i + 1}/{len(cases)} cases, {time.perf_counter() - start:.0f} s", file=sys.stderr)
    table = summarize(outcomes)
    print(table)
    for cls in CLASSES:
        bad = [o for o in outcomes if o.kind == cls]
        for o in bad[: args.show]:
            last = (o.stderr.strip().splitlines() or [""])[-1][:200]
            print(f"{cls}: {o.case.label[:100]} (argv {' '.join(a[:30] for a in o.case.argv)}): {last}")
    print(f"{len(cases)} cases in {time.perf_counter() - start:.0f} s (seed {args.seed})")
    if args.write_doc:
        write_doc(table, args)
    return 0 if all(o.kind == "ok" for o in outcomes) else 1


def write_doc(table: str, args) -> None:
    path = ROOT / "docs" / "reliability.md"
    text = path.read_text() if path.exists() else ""
    marker = "<!-- fuzz table -->"
    block = f"{marker}\n`python bench/fuzz.py --cases {args.cases} --seed {args.seed}`:\n\n{table}\n{marker}"
    if text.count(marker) == 2:
        before, _, rest = text.partition(marker)
        _, _, after = rest.partition(marker)
        text = before + block + after
    else:
        text += "\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
