"""The published step reference set (tests/data/step_reference.yaml) is well formed: every row cites a
source, names a GPU preset and a figure kind, and its layout resolves and fits in memory as written.
The scoring itself is bench/step_reference.py (it runs the engine; too slow for the suite)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuwait.spec.workload import WorkloadSpec
from gpuwait.workload import model as wm
from gpuwait.workload.presets import GPU_PRESETS

REFERENCE = yaml.safe_load((Path(__file__).resolve().parents[1] / "data" / "step_reference.yaml").read_text())


@pytest.mark.parametrize("row", REFERENCE["rows"], ids=lambda r: r["id"])
def test_row_is_cited_and_its_layout_runs(row):
    assert row["source"] in REFERENCE["sources"] and REFERENCE["sources"][row["source"]]["cite"]
    assert row["gpu"] in GPU_PRESETS and row["figure"] in ("tflops_per_gpu_megatron", "tflops_per_gpu_model")
    spec = WorkloadSpec(gpus=row["gpus"], model=row["model"], parallel=row["parallel"], compute={"gpu": row["gpu"]})
    shape = wm.resolve_model(spec.model)
    layout = wm.validate_layout(shape, spec, row["gpus"], 8)
    wm.check_fits(shape, layout, wm.resolve_gpu(spec.compute, shape.precision))


def test_gpt_rows_keep_the_published_parameter_count():
    # Narayanan et al. Table 1 and 2 sizes, from 12 l h^2 + V h with the 4h MLP written as SwiGLU of 8h/3
    for row in REFERENCE["rows"]:
        if row["source"] not in ("narayanan2021", "narayanan2021-t2"):
            continue
        published_b = float(row["id"].split("-")[1].rstrip("b"))
        shape = wm.resolve_model(WorkloadSpec(model=row["model"]).model)
        # gpuwait unties the LM head; the GPT models tie it, so count the embedding once
        params = shape.params - shape.vocab * shape.hidden
        # (position embeddings, biases and norms, which the table counts, add < 0.5 %; 1.7B is 1.65B rounded)
        assert params / 1e9 == pytest.approx(published_b, rel=0.035), row["id"]


def test_llama3_rows_are_laid_out_as_published():
    # Llama 3 §3.3.2 / Table 4: 126 layers, one fewer on the first and the last of 16 stages, 16M tokens
    for row in REFERENCE["rows"]:
        if row["source"] != "llama3-2024":
            continue
        spec = WorkloadSpec(gpus=row["gpus"], model=row["model"], parallel=row["parallel"], compute={"gpu": row["gpu"]})
        shape = wm.resolve_model(spec.model)
        layout = wm.validate_layout(shape, spec, row["gpus"], 8)
        assert shape.layers == 126 and layout.pp == 16 and sum(layout.stage_layer_counts) == 126
        assert layout.global_batch * shape.seq_len == 16 * 2**20


def test_unscored_rows_say_why():
    for row in REFERENCE["rows"]:
        if row.get("scored", True) is False:
            assert "not scored" in row["assumed"], row["id"]
