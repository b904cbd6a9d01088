"""The GPU registry: each name finds its own architecture, NVLink5 counts 50 GB/s links, unknown names fail."""

from __future__ import annotations

import json

import pytest

from gpuwait.cli.main import main
from gpuwait.collectives.tuning import nvlink_bw_GBps
from gpuwait.errors import SpecError
from gpuwait.fabric.perf import gpu_sm, nvlink_links
from gpuwait.spec.cluster import ServerSpec
from gpuwait.topology.gpus import GPU_ARCHS, gpu_arch
from gpuwait.topology.servers import SERVER_TEMPLATES, resolve_server


@pytest.mark.parametrize(("name", "arch", "sm"), [
    ("Tesla V100-SXM2-32GB", "V100", 70), ("A100-SXM4-80GB", "A100", 80), ("NVIDIA A800-SXM4-80GB", "A800", 80),
    ("NVIDIA A40", "A40", 86), ("L40S", "L40S", 89), ("NVIDIA L40", "L40", 89),
    ("H100-SXM5-80GB", "H100", 90), ("NVIDIA H100 80GB HBM3", "H100", 90), ("H200-SXM5-141GB", "H200", 90),
    ("NVIDIA H800", "H800", 90), ("NVIDIA H20", "H20", 90), ("GH200", "GH200", 90), ("NVIDIA GH200 480GB", "GH200", 90),
    ("B200-SXM-180GB", "B200", 100), ("NVIDIA B200", "B200", 100), ("GB200", "GB200", 100), ("GB300", "GB300", 103),
    ("RTX-2080Ti", "RTX 2080 Ti", 75), ("NVIDIA GeForce RTX 2080 Ti", "RTX 2080 Ti", 75),
    ("NVIDIA GeForce RTX 5090", "RTX 5090", 120),
])
def test_each_name_finds_its_own_entry(name, arch, sm):
    assert gpu_arch(name).name == arch and gpu_sm(name) == sm


def test_every_entry_matches_its_own_name_and_cites_a_source():
    for name, arch in GPU_ARCHS.items():
        assert gpu_arch(name) is arch and arch.source
        assert (arch.nvlink_links > 0) == (arch.nvlink_generation > 0)


@pytest.mark.parametrize("name", ["RTX-9999", "H1000", "A4000", "MI300X", ""])
def test_unknown_names_raise_naming_the_field(name):
    with pytest.raises(SpecError, match=r"server\.gpu_model: unknown GPU .*; expected a name containing one of V100, "):
        gpu_arch(name)


def test_links_follow_the_generation():
    """A100 12 and H100 18 links of 25 GB/s as before; a 900 GB/s NVLink5 B200 is 18 links of 50, not 36."""
    links = {name: nvlink_links(resolve_server(ServerSpec(template=name))) for name in SERVER_TEMPLATES}
    assert links["dgx-a100"] == links["oci-bm-gpu4.8"] == 12
    assert links["dgx-h100"] == links["dgx-h200"] == links["hgx-h100-4nic"] == 18
    assert links["pcie-8gpu"] == 0 and links["dgx-b200"] == 18
    for name in ("dgx-a100", "dgx-h100", "dgx-b200"):
        spec = SERVER_TEMPLATES[name]
        assert gpu_arch(spec.gpu_model).nvlink_Bps == spec.nvlink_bandwidth  # the template is the full part


def _perf(capsys, cluster: str) -> tuple[int, str, str]:
    code = main(["perf", "all_reduce", "-b", "8G", "-e", "8G", "--cluster", cluster, "--json"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_dgx_b200_all_reduce_beats_the_h100(capsys, tmp_path):
    cluster = tmp_path / "b200.yaml"
    cluster.write_text("cluster:\n  servers: 1\n  server: {template: dgx-b200}\n")
    code, out, _ = _perf(capsys, str(cluster))
    assert code == 0
    b200 = json.loads(out)["rows"][0]["oop_busbw_GBps"]
    code, out, _ = _perf(capsys, "dgx-h100")
    h100 = json.loads(out)["rows"][0]["oop_busbw_GBps"]
    assert b200 > 1.3 * h100
    # NCCL's graph sees 18 NVLink5 links of SM100_NVLINK_BW (topo.h v2.30.7)
    assert nvlink_bw_GBps(gpu_sm("B200-SXM-180GB"), 18) == pytest.approx(18 * 40.1)


def test_unknown_gpu_is_one_line_from_the_cli(capsys, tmp_path):
    cluster = tmp_path / "odd.yaml"
    cluster.write_text("cluster:\n  servers: 1\n  server: {template: dgx-h100, gpu_model: RTX-9999}\n")
    code, out, err = _perf(capsys, str(cluster))
    assert code != 0 and "Traceback" not in out + err
    line = next(x for x in err.splitlines() if "gpu_model" in x)
    assert "server.gpu_model: unknown GPU 'RTX-9999'" in line and "H100" in line and "B200" in line
