"""The checked reader: every class of bad input file becomes one SpecError line naming the file."""

from __future__ import annotations

import os
import time

import pytest

from gpuwait.errors import SpecError
from gpuwait.runner.inputs import load_scenario
from gpuwait.spec.reader import MAX_YAML_NODES, load_yaml_text, read_text_checked, read_yaml_checked, short_value

BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))


@pytest.mark.parametrize("body, message", [
    (b"", "empty; expected"),
    (b"# only a comment\n", "empty; expected"),
    (b"name: ok\nname: \xff\xfe\n", r"line 2, column 7: byte 0xff is not UTF-8"),
    (b"name: a\ncluster: {servers: 2}\nname: b\n", r"line 3: duplicate key 'name' \(first at line 1\)"),
    (b"name: x\nextra: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested deeper than 64 levels"),
    (BOMB.encode(), f"aliases expand to more than {MAX_YAML_NODES:,} values"),
    (b"name: " + b"9" * 5000 + b"\n", "an integer of 5,000 digits; expected at most 40"),
    (b"cluster: [1,\n", "not valid YAML at line"),
])
def test_bad_files_are_one_line(tmp_path, body, message):
    path = tmp_path / "s.yaml"
    path.write_bytes(body)
    start = time.perf_counter()
    with pytest.raises(SpecError, match=message) as err:
        load_scenario(path)
    assert time.perf_counter() - start < 2
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


def test_devices_directories_and_fifos_are_refused(tmp_path):
    with pytest.raises(SpecError, match="not a regular file"):
        read_yaml_checked("/dev/zero")
    with pytest.raises(SpecError, match="is a directory"):
        read_yaml_checked(tmp_path)
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="not a regular file"):
        read_yaml_checked(fifo)  # opening a FIFO would block forever


def test_size_limit(tmp_path):
    path = tmp_path / "big.log"
    path.write_bytes(b"x" * 2000)
    with pytest.raises(SpecError, match="2,000 bytes, over the limit of 1,000"):
        read_text_checked(path, max_bytes=1000)


def test_a_few_aliases_still_load():
    assert load_yaml_text("a: &r {kind: ecmp}\nb: *r\n", "s.yaml") == {"a": {"kind": "ecmp"}, "b": {"kind": "ecmp"}}
    assert load_yaml_text("a: 1\n<<: {b: 2}\n", "s.yaml") == {"a": 1, "b": 2}  # merge keys are not duplicates


def test_values_in_errors_are_cut(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: x\nworkload:\n  model: {preset: llama-8b}\n  steps: [" + ", ".join(["1"] * 20000) + "]\n")
    with pytest.raises(SpecError) as err:
        load_scenario(path)
    assert len(str(err.value)) < 400 and "(list of 20,000 items)" in str(err.value)
    assert short_value(10**50) == "an integer of 51 digits"


@pytest.mark.parametrize("value", [("1M",), ((1,),), [("a",)], {"k": ("v",)}, (), ("a", "b"), ["x"]])
def test_short_values_are_their_repr(value):
    assert short_value(value) == repr(value)
