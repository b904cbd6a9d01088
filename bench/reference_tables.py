"""Score today's collective model on every published nccl-tests table in the repository.

The tables are in ``tests/nccltests/data/reference/`` (each with its public source in a ``#``
header). For each one this script names the cluster gpuwait describes it with (a preset or a
cluster file, ``--servers``, ``-g``, NCCL variables), predicts the same sweep ``gpuwait perf``
prints, and scores the prediction: leave-one-table-out (the physical parameters fitted on every other
table) and as shipped (``PUBLIC_TABLE_FIT``). Tables gpuwait cannot describe yet are
listed with the reason. Run after any change to the collective model::

    python bench/reference_tables.py        # prints the report and writes docs/validation-reference.md
    python bench/reference_tables.py --default-nccl   # every table as NCCL 2.30.7, not its own release
    python bench/reference_tables.py --sizes efa      # per size of the matching tables: where the error sits
    python bench/reference_tables.py --print-fit      # the all-tables fit as PUBLIC_TABLE_FIT's literal

Each table is predicted as the NCCL release its log prints (or its source states), 2.30.7 otherwise.

Scores (each size's faster column of out-of-place and in-place, ``Row.steady_time_us``: a one-off cost in
a published table's timed loop only adds time; the H200 table gives in-place busbw only):

* busbw error ``|pred - meas| / meas`` for every size >= 1 MiB: median and worst per table, and
  median and p95 per hardware class over all its sizes;
* time floor error ``(pred - meas) / meas`` for sizes <= 64 KiB: the median per table (signed:
  below zero the model is faster than the hardware);
* the ramp: the smallest size whose busbw reaches 50 % and 90 % of the table's highest busbw,
  measured against predicted (``<=`` when the table starts above it);
* the algorithm switch sizes a table shows (its time falls as the size grows, or a size's out-of-place loop pays
  a one-off cost), each beside the mechanism's nearest prediction (the model's switch; for a one-off cost, its
  first use of an algorithm the warm-up did not connect): within a factor of 2 or not, or why the signal is not
  an NCCL choice change.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuwait.collectives.fit import PUBLIC_FIT_NAMES, Adjustment, Observation, fit
from gpuwait.collectives.nccltests import busbw_factor, size_and_count
from gpuwait.collectives.physical import PUBLIC_TABLE_FIT, adjust, pipelined_times_s, stack_costs
from gpuwait.collectives.tuning import candidates
from gpuwait.report.perf import choice_switches
from gpuwait.runner.inputs import load_cluster
from gpuwait.runner.perf import SweepArgs, make_predictor, perf_sweep
from gpuwait.telemetry.nccltests_log import parse_nccl_tests_log
from gpuwait.transport.platforms import cluster_platform

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "nccltests" / "data" / "reference"
CLUSTERS = DATA / "clusters"
MiB, KiB = 2**20, 2**10

CLASSES = ("H100 IB multi-node", "H100/H200 single node NVSwitch", "A100", "AWS EFA", "GH200 Slingshot/TCP", "L40S",
           "PCIe RTX", "H100 GPUDirect-TCPXO", "H100 RoCE multi-node", "GB200 NVLink", "GB200 NVL72 multi-rack",
           "B200 RoCE multi-node", "H100 GPUDirect-TCPX", "A100 Slingshot multi-node", "H200 RoCE multi-node",
           "B200 IB multi-node", "B200 single node NVSwitch", "GB300 NVLink",
           "GB300 NVL72 multi-rack")


@dataclass(frozen=True)
class Reference:
    """One published table and how gpuwait describes its cluster.

    ``cluster`` is a preset name or a file in ``CLUSTERS``; ``gpus`` the GPUs per server the run
    used. ``approximate`` says what the description gets wrong; ``not_describable`` why there is
    none (then nothing is predicted). ``not_fitted`` says why a table is scored but kept out of every
    fit (its transport is a guess, so its errors say nothing about the software costs the fit shares). ``nccl_version`` is the NCCL release predicted: the one the log
    prints (``NCCL version 2.26.2+cuda12.8``) unless given here; None = gpuwait's default (2.30.7).
    ``nccl_range`` (oldest, newest): the releases the public evidence leaves possible where it does not single one
    out; every modelled release in it predicts the table identically (tests/nccltests/test_reference_tables.py).
    """

    stem: str
    hw_class: str
    cluster: str | None = None
    servers: int = 1
    gpus: int = 8
    env: dict = field(default_factory=dict)
    approximate: str = ""
    not_describable: str = ""
    nccl_version: str | None = None
    not_fitted: str = ""
    gpus_per_thread: int | None = None  # nccl-tests -g where the table has no header line saying it
    nccl_range: tuple[str, str] | None = None
    collective: str = "all_reduce"  # what a table ran where it does not say (a log prints it or its columns tell)
    n_ranks: int | None = None  # the rank count where a log's device line misstates it (its busbw / algbw gives it)

    def threads_gpus(self) -> int:
        """GPUs one host thread drove (nccl-tests ``-g``): the header's ``nGpus``, else ``gpus_per_thread``, else 1."""
        found = re.search(r"^#\s*nThread\s+\d+\s+nGpus\s+(\d+)", self.path.read_text(), re.MULTILINE)
        return int(found.group(1)) if found else (self.gpus_per_thread or 1)

    def version(self) -> str | None:
        """The NCCL release to predict: ``nccl_version``, else the one the log prints (if modelled)."""
        if DEFAULT_VERSION_ONLY or self.nccl_version:
            return None if DEFAULT_VERSION_ONLY else self.nccl_version
        found = re.search(r"^NCCL version (\d+\.\d+\.\d+)", self.path.read_text(), re.MULTILINE)
        return found.group(1) if found else None

    @property
    def path(self) -> Path:
        suffix = ".txt" if self.stem.endswith("busbw-only") else ".md" if self.stem.endswith("-summary") else ".log"
        return DATA / (self.stem + suffix)

    def cluster_arg(self) -> str:
        file = CLUSTERS / f"{self.cluster}.yaml"
        return str(file) if file.exists() else str(self.cluster)

    def describe(self) -> str:
        where = f"{self.cluster}.yaml" if (CLUSTERS / f"{self.cluster}.yaml").exists() else f"`{self.cluster}`"
        env = "".join(f" {k}={v}" for k, v in self.env.items())
        version = f" NCCL {self.version()}" if self.version() else ""
        return f"{where} {self.servers}x{self.gpus}{env}{self.platform_env()}{version}"

    def platform_env(self) -> str:
        """What the cluster's platform sets that the table's env does not (gpuwait.transport.platforms), e.g.
        `` (p4de.24xlarge: NCCL_PROTO=Simple)``; empty when nothing."""
        if not self.cluster:
            return ""
        platform = cluster_platform(load_cluster(self.cluster_arg()))
        applied = [f"{k}={v}" for k, v in platform.env.items() if k not in self.env] if platform else []
        return f" ({platform.name}: {' '.join(applied)})" if applied else ""


#: ``--default-nccl``: predict every table as gpuwait's default NCCL release (to see what the versions change)
DEFAULT_VERSION_ONLY = False
_TCP = "NCCL_IB_DISABLE=1"
#: what every A3 Mega TCPXO description guesses, and why those tables stay out of the fits
_TCPXO_GUESSES = ("TCPXO's per-message cost is the kernel socket path's (no public figure); the fabric behind the 8 "
                  "NICs is not published (non-blocking leaf-spine)")
_TCPXO_NOT_FITTED = "; its transport's costs are assumptions no other table shares"
#: ALCF Polaris, setup (5) of argonne-lcf/alcf-nccl-tests bench_opt.sh @1922bfd (its env.dat.5): the NCCL variables the model
#: reads; NCCL 2.18.3 is NVHPC 23.9's libnccl on x86_64 (the run's ldd.dat; HPC SDK 23.9 release notes)
_POLARIS_ENV = {"NCCL_NET_GDR_LEVEL": "PHB", "NCCL_NET": "AWS Libfabric"}
_POLARIS_APPROXIMATE = (
    "Polaris nodes described from ALCF's machine overview (4 x A100-SXM4-40GB in an NVLink mesh, NV4 per pair; 2 x "
    "200 Gb/s Slingshot 11 NICs beside GPU3 and GPU1; 4 NUMA nodes of one AMD Milan); NCCL version not printed: 2.18.3 "
    "(NVHPC 23.9's, the run's ldd); the run's NCCL_CROSS_NIC=1, NCCL_COLLNET_ENABLE=1 (no in-network reduction on "
    "Slingshot) and its CXI provider settings (FI_CXI_RX_MATCH_MODE=software, FI_CXI_RDZV_PROTO=alt_read, ...) are not "
    "modelled (transport.platform: none, not CSCS's); aws-ofi-nccl's version is the README's build (v1.9.1-aws), not "
    "printed; Slingshot's per-message cost and dragonfly are not published (a non-blocking leaf-spine with adaptive "
    "routing)")
#: the single-node H100 runs of xxrjun/nccl-tests-cluster (example-cluster01, node cnode3-002)
_XXRJUN_APPROXIMATE = ("8 x H100 80GB HBM3 described as a DGX H100: the server model is not stated and NVSwitch is inferred "
                       "from the same log's 482 GB/s all_reduce busbw (NVLS); the run's doubles are predicted as the same "
                       "bytes of floats; only 32 MiB-16 GiB printed (no floor); NCCL 2.29.2 is the nccl-tests header's "
                       "nccl-library=22902, no NCCL version line")
#: tables found after PUBLIC_TABLE_FIT was fitted: scored, kept out of every fit, as data the model never saw
_AFTER_THE_FIT = "published table found after the shipped fit; scored as data no fit has seen"
#: gj-aion's runs in nccl-tests#309 (2025-06-18) print no NCCL version: the newest release tagged before the post,
#: v2.27.3-1 (2025-05-29; v2.27.5-1, tagged the day of the post, and the thread's other poster's 2.26.2 predict these
#: tables identically; 2.22.3 and older do not, and no source bounds the release from below). Both 8-node tables time
#: their 8 MiB out-of-place row 2.3-4x the in-place one, as the first timed loop after NCCL connects an algorithm
#: does (NCCL_RUNTIME_CONNECT, default 1 since v2.22.3-1: ncclPrepareTasks, src/enqueue.cc) when nccl-tests warmed
#: up only the first and last sizes (src/common.cu before v2.16.8): NVLSTree's first use at 8 MiB, NCCL's switch
#: with NVLSTree's 14 us network latency (2.22-2.28.7), not 2.28.9's 20.9 (switch at 16 MiB)
_GJ_AION_NCCL = "2.27.3"
#: dgxc-benchmarking's nccl recipe from its first release with the sample table (NVIDIA/dgxc-benchmarking 8e77d60,
#: v25.10, 2025-12-04: nccl/metadata.yaml) runs nvcr.io#nvidia/nemo:25.09.00 and that container's nccl-tests
#: (nccl/config/nemofw.user.toml: NCCL_TEST_PATH=/usr/local/bin). NeMo Framework 25.09 is built on the PyTorch 25.06
#: container (NVIDIA-NeMo/Megatron-Bridge docs/releases/software-versions.md: PyTorch 2.8.0a0+5228986c39.nv25.6, CUDA
#: 12.9.1; NVIDIA/NeMo r2.5.0 requirements/manifest.json: nvcr.io/nvidia/pytorch:25.06-py3), whose NCCL is 2.27.3
#: (+cuda12.9, the release CUDA 12.9.1's own images install); a container of June 2025 holds no release newer than
#: v2.27.5-1 (tagged 2025-06-18), which predicts this table as 2.27.3 does
_NEMO_25_09_NCCL = "2.27.3"
#: the p5 Batch job runs public.ecr.aws/hpc-cloud/nccl-tests:latest, which aws-samples/awsome-distributed-training's
#: micro-benchmarks/nccl-tests/buildspec.yaml builds and pushes from its first commit (dc0e5444, 2024-07-26); up to the
#: commit that publishes the table (0fbac547, 2024-10-30) it built NCCL v2.21.5-1, v2.22.3-1 (11668129, 2024-09-06)
#: and v2.23.4-1 (bd491b37, 2024-09-17), each with nccl-tests v2.13.9 or v2.13.10
_AWS_BATCH_NCCL = "2.23.4"
#: the p5 EFA table first appears in aws-samples/awsome-distributed-training 88c2e71b (2024-04-19) as the output of the
#: README's slurm/nccl-tests.sbatch (srun -l, all_reduce_perf -b 8 -e 16G: that command from 74193cae, 2024-04-16) in
#: the README's container, built with NCCL 2.20.3, aws-ofi-nccl 1.8.1 and nccl-tests 2.13.9: the Dockerfile's
#: defaults since 0396075b (2024-03-21; 2.19.4 from 9b19b958, 2024-03-11, predicts the table as 2.20.3 does; an image
#: built before that, with 2.18.5, is a real doubt: the same README at 88c2e71b says its other sample ran NCCL 2.18.5
#: with aws-ofi-nccl 1.7.3, so its samples did not always come from the Dockerfile's defaults, and 2.18.5 predicts
#: this table differently at every size: 63.0 against 71.8 us at 8 B). The p4de table of the same commit ends at 2 GiB, which no
#: all_reduce command of the repository's container sbatch ran (-e 2G was its scatter_perf before 74193cae): its date,
#: and so its NCCL (2.18.5, 2.19.4 or 2.20.3, which do not all predict it alike), is not known
_AWS_P5_EFA_NCCL = "2.20.3"
#: CSCS's nccl-tests container (eth-cscs/cscs-docs docs/software/communication/dockerfiles/base, a186743) starts from
#: nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04, which installs and apt-marks libnccl2 and libnccl-dev
#: 2.25.1-1+cuda12.8 (its layers' ENV NCCL_VERSION=2.25.1-1); the (*) run names the same EDF (nccl-test-ompi)
_CSCS_NCCL = "2.25.1"
#: the A3 Mega all_reduce table (lessizzmore/create-a3mega-ztan-fork 02dd8f4) prints no NCCL version: the image its
#: README builds loads the TCPXO plugin's own NCCL from /var/lib/tcpxo/lib64 (NCCL_LIB_DIR of nccl-env-profile.sh),
#: listed there as libnccl.so.2.21.5 (README); the startup scripts also build v2.22.3-1 into /usr/local, which
#: predicts the table identically (nccl_range)
_A3MEGA_2024_NCCL = "2.21.5"
#: CoreWeave's GB200 NVL72 example job (coreweave/nccl-tests slurm/nccl-test-distributed-gb200-nvl72-enroot.slurm @bee97e71)
#: and what its README's tables (one rack, 2 racks, 20 racks) leave unsaid
_COREWEAVE_GB200_ENV = {"NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "0"}
_COREWEAVE_RACKS = ("CoreWeave's fabric, routing and NIC speed are not published (the preset's rail-optimized NDR InfiniBand "
                    "leaf-spine, 4 x 400G per tray, static routing); the run's NCCL_NET_GDR_C2C=1 is not modelled; only "
                    "512 MiB-16 GiB printed, as an excerpt without the header; NCCL 2.26.2 is the README's statement, not "
                    "printed")
#: xxrjun/nccl-tests-cluster's example-cluster01 at 2 and 10 nodes (the same nodes as _XXRJUN_APPROXIMATE's), 1 and 8 GPUs per node
#: Together AI's B200 cluster on DGX Cloud (togethercomputer/together-nccl-tests, run 2 of its sendrecv scaling study):
#: the job script's NCCL_NVLS_ENABLE=0 (benchmarks/nccl_sendrecv_Nnode.sh)
_TOGETHER_ENV = {"NCCL_NVLS_ENABLE": "0"}
_TOGETHER_APPROXIMATE = ("B200 nodes with 8 x ConnectX-7 400 Gb/s InfiniBand (the repository's report) described by the dgx-b200 "
                         "template; the fabric is not published (the dgx-h100 preset's non-blocking rail-optimized leaf-spine, "
                         "static routing); the 2-, 4- and 8-node runs used different node sets of the one cluster; the job "
                         "script's NCCL_IB_HCA (the 8 GPU-side devices of 16) and CUDA_DEVICE_MAX_CONNECTIONS=32 are not modelled")
_XXRJUN_NET_APPROXIMATE = ("H100 80GB HBM3 nodes (cnode3-002..011) described by the dgx-h100 preset: the network is not stated; one "
                           "400 Gb/s RDMA NIC per GPU is inferred from the same cluster's 48.9 GB/s one-GPU-per-node all_reduce and "
                           "45.9 GB/s per-GPU 2-node sendrecv (InfiniBand NDR assumed; RoCE is as likely), the switch layout and "
                           "routing are not published (the preset's non-blocking fabric); NVSwitch inferred from the same nodes' 482 "
                           "GB/s single-node all_reduce; the run's doubles predicted as the same bytes of floats; only sizes from 32 "
                           "MiB printed (no floor); NCCL 2.29.2 is the nccl-tests header's nccl-library=22902, no NCCL version line")
#: the gIB plugin's A4 High settings the model reads (GoogleCloudPlatform/cluster-toolkit
#: examples/machine-learning/a4-highgpu-8g/a4high-vm.yaml @1047080375)
_GIB_A4_ENV = {"NCCL_IB_QPS_PER_CONNECTION": "4", "NCCL_NET_GDR_LEVEL": "PIX"}
#: what those settings hold that gpuwait does not model
_GIB_NOT_MODELLED = ("Google's tuner configuration (NCCL_TUNER_CONFIG_PATH, rules not published), NCCL_CROSS_NIC=0, "
                     "NCCL_P2P_NET_CHUNKSIZE=131072 and NCCL_IB_ADAPTIVE_ROUTING=1 are not modelled; Google's RoCE "
                     "fabric is not published (a non-blocking rail-optimized leaf-spine with ECMP assumed)")
#: MGHPCC AICR's B200 node b0027 (mghpcc/aicr-benchmarks Benchmark_WG/nccl-tests/out-1node/nvhpc-26.3-b0027-9175)
_AICR_B200_APPROXIMATE = ("8 x B200 on NVLink 5 / NVSwitch (the repository's results_b200.md) described by the dgx-b200 "
                          "template: the server model is not stated; AMD Turin host (no effect on one node's tuning); "
                          "NCCL 2.29.3 is the nccl-tests header's nccl-library=22903, no NCCL version line; only 1 MiB-16 GiB "
                          "by factors of 4 printed (no floor)")
#: OCI's GB300 page (oracle-quickstart/oci-gpu-quickstarts nvidia/GB300/README-GB300.md @96ac1ec4): 1, 2 and 16 trays of one
#: rack, one command (NCCL_NVLS_ENABLE=1, NCCL_MNNVL_ENABLE=1), NCCL 2.28.7 printed
_OCI_GB300_APPROXIMATE = ("OCI BM.GPU.GB300.4 trays of one rack described by the gb300-nvl72 preset (one NVLink domain); the "
                          "trays' 8 x 400G RoCE NICs (the preset: 4 x 800G InfiniBand) carry nothing inside one domain; the "
                          "run's NCCL_BUFFSIZE=16777216 (4x the default Simple buffer), NCCL_NET_GDR_C2C=1 and "
                          "NCCL_DMABUF_ENABLE=1 are not modelled; only 512 KiB-16 GiB printed (no floor)")
REFERENCES = [
    Reference("h100-ib-2node-16gpu-all_reduce", CLASSES[0], "dgx-h100", 2, 8),
    Reference("h100-ib-2node-16gpu-all_reduce-ring-forced", CLASSES[0], "dgx-h100", 2, 8,
              {"NCCL_ALGO": "Ring", "NCCL_MIN_CTAS": "24", "NCCL_IB_QPS_PER_CONNECTION": "2"},
              approximate="NIC count not stated by the poster (8x 400G assumed, as the thread's maintainer does)",
              nccl_version=_GJ_AION_NCCL),
    Reference("h100-ib-4node-32gpu-all_reduce", CLASSES[0], "dgx-h100", 4, 8,
              approximate="GPUs and HCAs passed through to VMs with a custom NCCL_TOPO_FILE; switch topology not stated"),
    Reference("h100-ib-8node-64gpu-all_reduce", CLASSES[0], "dgx-h100", 8, 8,
              approximate="NIC count, adaptive routing and switch topology not stated (8x 400G, static routing assumed)",
              nccl_version=_GJ_AION_NCCL),
    Reference("h100-ib-8node-64gpu-all_reduce-minctas24-qps2", CLASSES[0], "dgx-h100", 8, 8,
              {"NCCL_MIN_CTAS": "24", "NCCL_IB_QPS_PER_CONNECTION": "2"},
              approximate="NIC count, adaptive routing and switch topology not stated (8x 400G, static routing assumed)",
              nccl_version=_GJ_AION_NCCL),
    # the same poster's cluster on 2 and 4 of its 8 nodes (nccl-tests#309, gj-aion 2025-06-18), found after the fit
    Reference("h100-ib-2node-16gpu-all_reduce-gjaion", CLASSES[0], "dgx-h100", 2, 8,
              approximate="NIC count, adaptive routing and switch topology not stated (8x 400G, static routing assumed)",
              nccl_version=_GJ_AION_NCCL, not_fitted=_AFTER_THE_FIT),
    Reference("h100-ib-4node-32gpu-all_reduce-gjaion", CLASSES[0], "dgx-h100", 4, 8,
              approximate="NIC count, adaptive routing and switch topology not stated (8x 400G, static routing assumed)",
              nccl_version=_GJ_AION_NCCL, not_fitted=_AFTER_THE_FIT),
    Reference("h100-dgx-1node-8gpu-all_reduce", CLASSES[1], "dgx-h100", 1, 8,
              approximate="NCCL version not printed: 2.27.3, the NCCL of the recipe's container (nvcr.io#nvidia/"
                          "nemo:25.09.00, built on the PyTorch 25.06 container)",
              nccl_version=_NEMO_25_09_NCCL, nccl_range=("2.27.3", "2.27.5")),
    Reference("h100-nvswitch-1node-8gpu-all_reduce-awsbatch-p5", CLASSES[1], "dgx-h100", 1, 8,
              approximate="AWS p5.48xlarge (H100 SXM, NVSwitch) described as a DGX H100; NCCL from the aws-ofi-nccl "
                          "image with its tuner plugin (NCCL_TUNER_PLUGIN), which gpuwait does not model; NCCL version "
                          "not printed: the image's build (the repository's buildspec.yaml) carried 2.21.5, 2.22.3 "
                          "and 2.23.4 between its first push and the table's commit, which predict the table "
                          "identically",
              nccl_version=_AWS_BATCH_NCCL, nccl_range=("2.21.5", "2.23.4")),
    Reference("h200-nvswitch-1node-8gpu-all_reduce-nvls-busbw-only", CLASSES[1], "nd-h200-v5", 1, 8,
              {"NCCL_ALGO": "NVLS"}, nccl_version="2.20.5", gpus_per_thread=8),  # version: stated, not printed
    Reference("gcp-a3mega-1node-8gpu-all_reduce-summary", CLASSES[1], "gcp-a3-mega-tcpxo", 1, 8,
              nccl_version="2.28.7", gpus_per_thread=8,  # version and -g 8: stated by the source, not printed
              approximate="A3 Mega's NVLink4/NVSwitch node described by the dgx-h100 template; 7 sizes of the sweep "
                          "printed, one time each (not the out-of-place / in-place pair)",
              not_fitted=_AFTER_THE_FIT),
    Reference("h100-nvswitch-1node-8gpu-all_reduce-nvls-ndv5-busbw-only", CLASSES[1], "nd-h100-v5", 1, 8,
              {"NCCL_ALGO": "NVLS"}, nccl_version="2.18.5", gpus_per_thread=8,  # version and -g 8: stated, not printed
              approximate="Azure ND H100 v5 described by the dgx-h100 template; in-place busbw only, sizes from rounded "
                          "labels; NCCL 2.18.5 is the page's system table, not printed by the run",
              not_fitted=_AFTER_THE_FIT),
    Reference("a100-dgx-4gpu-all_reduce", CLASSES[2], "dgx-a100", 1, 4,  # devices 4-7 of 8: the same on NVSwitch
              gpus_per_thread=4,
              approximate="the run's NCCL 2.16.2 (the header's CoreWeave container tag) is older than gpuwait's oldest "
                          "modelled release, 2.18.1; every modelled release predicts this table identically "
                          "(ring/Simple at 1-8 GiB), so the default is predicted"),
    Reference("a100-nvswitch-1node-8gpu-all_reduce-ndv4-busbw-only", CLASSES[2], "nd-a100-v4", 1, 8,
              nccl_version="2.18.5", gpus_per_thread=8,  # version and -g 8: stated by the page, not printed
              approximate="Azure ND A100 v4 described by the dgx-a100 template; in-place busbw only, sizes from rounded "
                          "labels; NCCL 2.18.5 is the page's system table, not printed by the run; the page says the NVLS "
                          "run, which A100 cannot run (the script ran NCCL_ALGO = Tree, Ring, NVLS, NVLSTree in turn), so "
                          "the column is the Tree or the Ring run: predicted as NCCL's own choice, which is ring at every "
                          "size on one node (the same as NCCL_ALGO=Ring)",
              not_fitted=_AFTER_THE_FIT),
    # version: the table first appears in oracle-quickstart/oci-hpc-oke commit 1402938 (2024-02-13) beside the
    # manifest that ran it (manifests/a100-nccl-test.yaml: image nccl-tests:pytorch-23.10-nccl-2.19.3-1, job
    # nccl-allreduce-job0, the pod names the table prints)
    Reference("a100-oci-2node-16gpu-roce-all_reduce", CLASSES[2], "oci-a100-roce", 2, 8,
              {"NCCL_IB_QPS_PER_CONNECTION": "4"}, nccl_version="2.19.3",
              approximate="the run's NCCL_CROSS_NIC=1 is not modelled (a non-blocking fabric: no effect on the "
                          "paths' rates); NCCL 2.19.3 splits each message over the 4 QPs (NCCL_IB_SPLIT_DATA_ON_QPS "
                          "default 1 before 2.20; ncclIbMultiSend, src/transport/net_ib.cc v2.19.3-1: one RDMA write "
                          "with immediate per QP, the data in 128 B-aligned quarters, the receiver waiting for all 4 "
                          "completions), modelled as round-robin whole messages (the same bytes per QP): the write "
                          "with the data is posted first and LL/LL128 receivers poll their flags, not completions, so "
                          "the 3 extra work requests per message are off an LL step's path, and costing them as 4x "
                          "the per-message overhead moves no row up to 8 MiB by more than 0.4 us; the two "
                          "nodes' place in OCI's 3-tier Clos is not stated (the preset puts them under one leaf); "
                          "the 8 B-64 KiB rows run 7-12 us above the model (NCCL's tree/LL latency + launch), which the H100 "
                          "2-node IB table meets within +6 %: NCCL's tree/LL latency has no GPU-generation, CPU or "
                          "transport term (the net plugin's latency aside, 0 for NCCL's own IB/RoCE; the same in "
                          "2.19.3 and 2.30.7, src/graph/tuning.cc; its AMD network post overhead, "
                          "getNetOverhead's 2 us, enters only the ring's, 69 us here); the other A100 table with small sizes "
                          "(p4de: Intel host, EFA, ring/Simple, 30 latency steps) runs the same 0.66 us per latency step "
                          "above the model as this one (16 steps), the five H100 tables 0.05-0.11 us per step below it: a cost of the "
                          "A100 generation more than of this host (AMD Rome, 4 PCIe switch levels to the NICs) or "
                          "OCI's RoCE, which no public source prices: modelled as the A100 generation's step latency "
                          "(sm80_step_latency_s, every step of NCCL's latency chain on compute capability 8.0, fitted "
                          "across the tables; leave-one-table-out it comes from the p4de and DGX A100 tables)"),
    Reference("a100-efa-2node-16gpu-all_reduce", CLASSES[3], "aws-p4de-efa", 2, 8,
              approximate="SRD's congestion control and the EFA fabric are not modelled (non-blocking leaf-spine, "
                          "packets sprayed evenly); NCCL version not printed and not pinned: the repository's container "
                          "built 2.18.5 until 2024-03-11, then 2.19.4 and 2.20.3, which do not all predict the table "
                          "alike, and the run's 8 B-2 GiB sweep is not the command its README prints (2.30.7 predicted; "
                          "NCCL_PROTO=Simple, which aws-ofi-nccl sets on p4de, comes from the cluster's platform: "
                          "gpuwait.transport.platforms)"),
    Reference("h100-efa-2node-16gpu-all_reduce", CLASSES[3], "aws-p5-efa", 2, 8,
              approximate="SRD's congestion control and the EFA fabric are not modelled (non-blocking leaf-spine, "
                          "packets sprayed evenly); aws-ofi-nccl's NVLSTree chunk setting is not modelled (no tuner "
                          "plugin ran: the run sets no NCCL_TUNER_PLUGIN); NCCL and plugin versions not printed: NCCL "
                          "2.20.3 and aws-ofi-nccl 1.8.1 are the container the README that publishes the table builds (the "
                          "same README's other sample names 2.18.5, which would predict this table differently)",
              nccl_version=_AWS_P5_EFA_NCCL, nccl_range=("2.19.4", "2.20.3")),
    Reference("gh200-slingshot-2node-8gpu-all_reduce", CLASSES[4], "alps-gh200-slingshot", 2, 4,
              approximate="the CSCS container hook's NCCL_PROTO=^LL128 and NCCL_NET_GDR_LEVEL=PHB come from the "
                          "cluster's platform (cscs-alps, gpuwait.transport.platforms), not printed with the table; NCCL "
                          "version not printed: 2.25.1, which the page's container template's base image "
                          "(dockerfiles/base: nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04) installs and holds (2.25.1 "
                          "to 2.30.7 give the same choices and times here); aws-ofi-nccl reports latency 0 "
                          "(OFI_NCCL_NET_LATENCY off AWS) and the CXI link's 200 Gbit/s (libfabric cxip_nic.c); at "
                          "1 MiB NCCL's own model picks ring/LL too (llMaxBws 39 GB/s on a non-AMD host at 2 nodes): "
                          "LL steps above 2 KiB of data are CXI rendezvous messages, one 4.6 us Get round trip each "
                          "(libfabric fi_cxi.7; 2 x CSCS's 2.3 us osu_latency), which gives the 2K-4K step; under "
                          "FI_CXI_RX_MATCH_MODE=software each Get also waits half a pass of the receiver's proxy, "
                          "the software match's own cost is not published and not modelled (512K-1M stay 16-29 % "
                          "fast, 128K-256K 14-32 % slow; 256K, 512K and 1M, 109/170/164 us, fit no one affine "
                          "choice: a +61 us doubling then -6 us); Slingshot's wire "
                          "format, per-message cost and dragonfly not published (RoCEv2 framing, a non-blocking leaf-spine); the 6-links-per-pair NVLink mesh is "
                          "JUPITER's published figure for the same 4-superchip board",
              nccl_version=_CSCS_NCCL),
    Reference("gh200-nooptnet-2node-8gpu-all_reduce", CLASSES[4], "alps-gh200-nocxi", 2, 4,
              approximate="the source does not say what NCCL fell back to with the CXI hook disabled; described as "
                          "NCCL's socket transport over the four hsn interfaces, read at 200 Gbit/s each "
                          "(/sys/class/net, net_socket.cc), which puts the LL-to-Simple switch between 1 MiB (1502 us) "
                          "and 2 MiB (922 us) as the table has it, each port held to a quarter of the ~3.1 GB/s per "
                          "node CSCS measured on the same nodes and hook setting (osu_bw 3.12 GB/s per pair, "
                          "osu_alltoall 2.95 GB/s per node with 4 ranks, docs/software/communication/openmpi.md); what "
                          "sets that per-node limit is not published. The other candidate does not fit the switch: "
                          "the CXI and (*) runs name the same EDF (nccl-test-ompi), whose AWS OFI hook sets "
                          "NCCL_NET=\"AWS Libfabric\" (nccl.md), and without CXI the plugin would run on the image's "
                          "libfabric v1.22.0 tcp provider (dockerfiles/libfabric; accepted by aws-ofi-nccl "
                          "src/nccl_ofi_ofiutils.cpp), whose fi_info carries no NIC attributes (prov/util/src/"
                          "util_main.c), so the plugin reports port speed 0 (src/nccl_ofi_net.cpp "
                          "set_nic_props_default, v1.16.3 on), which NCCL reads as 10 Gbit/s (src/graph/topo.cc "
                          "v2.25.1-1): Simple from 256 KiB on four such devices, 32 KiB on one. The path's "
                          "per-message cost is CSCS's osu_bw (*) curve (the cluster file's message_curve, read as "
                          "LogGP's o = 6.25 us at 1 B and G = 1/3.12 GB/s from 4 MiB: its 16-64 KiB middle is MPI's "
                          "eager protocol), paid at each message's bytes on the wire (LL: twice its data) by the "
                          "socket send and receive of each network crossing, which puts the floor (~50 us at "
                          "8 B-8 KiB) within 25 % and ring/LL 256 KiB-1 MiB within 41 %; tree/LL 16-64 KiB still "
                          "runs 1.5-4x slower than the model, not explained by NCCL's source: off AWS and GCP its "
                          "socket transport runs no helper threads (net_socket.cc v2.25.1-1: autoNt 0, autoNs 1), "
                          "each rank's own proxy makes one call per crossing with the same 8 KiB on the wire at "
                          "8 KiB and 16 KiB (58.5 -> 107.8 us), and the LL channels NCCL adds with size "
                          "(topoGetAlgoInfo: 2, 4, 8, 8 at 8-64 KiB) are modelled; a node's calls served by one "
                          "queue would fit these rows but not ring/LL 128 KiB-1 MiB, which fit each direction in "
                          "its own (a tree crossing at 64 KiB costs 137 us, a ring step of the same 16 KiB "
                          "messages 80 us): a cost the node's ranks share, of this host, not NCCL; 32 MiB (17.3 ms, 82 % of "
                          "64 MiB's time) is a dip of the run; NCCL version not printed: 2.25.1, as the CXI run's (the "
                          "same EDF)",
              not_fitted="the transport is assumed, not stated by the source", nccl_version=_CSCS_NCCL),
    Reference("l40s-roce-2node-4gpu-all_reduce-ring", CLASSES[5], "r760xa-l40s-2x400g", 2, 2, {"NCCL_ALGO": "Ring"},
              approximate="the two HCAs are SR-IOV VFs sharing one 400GbE port (modelled as the port); "
                          "GPU0-NIC path NODE (the README's nvidia-smi), so no GPUDirect RDMA at NCCL's default level; the "
                          "second GPU on the other socket (SHM between the GPUs) inferred from bus IDs only; "
                          "NCCL_ALGO=Ring may not have been in effect"),
    Reference("l40s-tcp-2node-2gpu-all_reduce-ring", CLASSES[5], "r760xa-l40s-2x400g", 2, 1,
              {"NCCL_IB_DISABLE": "1", "NCCL_ALGO": "Ring"},
              approximate=f"{_TCP} with the image's Mellanox/nccl-rdma-sharp-plugins (libnccl-net.so in /usr/local/lib, on "
                          "the README's LD_LIBRARY_PATH; the cluster file's transport.net_plugin: ibext): NCCL tries "
                          "external plugins before its own IB and socket transports (src/plugin/net.cc v2.27.3-1), "
                          "NCCL_IB_DISABLE only disables NCCL's own IB (net_ib.cc) and the plugin's IBext reads "
                          "NCCL_IBEXT_DISABLE instead (src/ib_plugin.c; NVIDIA/nccl#676, NVIDIA/nccl-tests#227, #373), "
                          "and the command names NCCL_IB_HCA=mlx5_1,mlx5_3: predicted as that RoCE path (host-staged, "
                          "no GPUDirect at GPU-NIC PHB), floor +14 % (14.5 us against 12.2 at 8 B; the time keeps "
                          "ring's own network latency at one GPU per node, 6.6 + 2 x 2.7 us, where NCCL's choice uses "
                          "its ppn=1 rule's Tree figure, 6.6 + 2 x 5.0 us, src/graph/tuning.cc v2.27.3-1: "
                          "collectives.tuning.Prediction.own_net_latency_us); as NCCL's socket path "
                          "(NCCL_IBEXT_DISABLE=1 too) +67 %: two "
                          "socket crossings cost more than the measured 12.2 us total (a genuine 2-rank socket floor, "
                          "NVIDIA/nccl-tests#82, is 38-46 us); sizes from 1 MiB are the same on both (host-staged)",
              not_fitted="the transport is inferred (the plugin the image installs, and the floor), not printed "
                         "by the log (NCCL_DEBUG=VERSION)"),
    Reference("gcp-a3mega-tcpxo-2node-16gpu-all_gather-summary", CLASSES[7], "gcp-a3-mega-tcpxo", 2, 8,
              nccl_version="2.28.7", collective="all_gather",  # version: stated by the source, not printed
              approximate="Google's tuner plugin (NCCL_TUNER_PLUGIN in the platform's settings; its rules are not "
                          "published), NCCL_BUFFSIZE and NCCL_P2P_NET_CHUNKSIZE are not modelled; " + _TCPXO_GUESSES
                          + "; which of Google's two NCCL profiles ran is not said (the platform's "
                          "NCCL_PROTO=Simple,LL128 is predicted); 13 sizes printed, one time each",
              not_fitted=_AFTER_THE_FIT + _TCPXO_NOT_FITTED),
    Reference("gcp-a3mega-tcpxo-2node-16gpu-all_reduce", CLASSES[7], "gcp-a3-mega-tcpxo", 2, 8,
              nccl_version=_A3MEGA_2024_NCCL, nccl_range=("2.21.5", "2.22.3"),
              approximate="NCCL version not printed: 2.21.5, the libnccl the image's TCPXO plugin installer (v1.0.4) puts "
                          "in /var/lib/tcpxo/lib64 (the README's listing), which the run's env profile points at; the "
                          "image also builds NCCL 2.22.3 into /usr/local, which nccl-tests links (the two predict this table "
                          "identically). The settings that "
                          "plugin's env profile exported are not published: the platform's v1.0.15 settings "
                          "(NCCL_PROTO=Simple,LL128, ...) are predicted; Google's tuner plugin, FASTRAK flows and "
                          "NCCL_BUFFSIZE are not modelled; " + _TCPXO_GUESSES,
              not_fitted=_AFTER_THE_FIT + _TCPXO_NOT_FITTED),
    Reference("h100-oci-roce-2node-16gpu-all_reduce", CLASSES[8], "oci-bm-gpu-h100-roce", 2, 8,
              {"NCCL_IB_SPLIT_DATA_ON_QPS": "0"}, nccl_version="2.21.5",  # version: stated by the page, not printed
              approximate="OCI BM.GPU.H100.8 described by the dgx-h100 template with 16 x 200G RoCE ports (two per "
                          "GPU); the cluster network's topology is not published (the oci-a100-roce preset's "
                          "non-blocking rail-optimized leaf-spine); only 1-16 GiB printed; NCCL 2.21.5 is the page's "
                          "statement (the TensorFlow 24.06 container's NCCL), not printed by the run; the run's "
                          "NCCL_CUMEM_ENABLE=0, NCCL_IB_GID_INDEX=3, NCCL_IB_TC=41 and NCCL_IGNORE_CPU_AFFINITY=1 are "
                          "not modelled. Known gap (-20 %): as the page's 16 x 200G NICs (two per GPU) the model picks ring/Simple "
                          "(NCCL's NVLSTree graph gives each head one 200G NIC), 370 GB/s at 16 GiB with both of each "
                          "GPU's NICs carrying its channels (routing.paths.connection_rows; 195 GB/s when a GPU reached "
                          "one NIC per QP). Read as 8 dual-port NICs, which the HCA list's consecutive pairs (mlx5_0/1, "
                          "3/4, ... with 2 and 11 left out) suggest and NCCL 2.20+ merges into one 400G device per NIC "
                          "(NCCL_IB_MERGE_NICS, src/transport/net_ib.cc), it picks NVLSTree and predicts 446-461 GB/s "
                          "(measured 446-465); the page does not say which, so the page's reading is kept",
              not_fitted=_AFTER_THE_FIT),
    Reference("gb200-nvlink-1node-4gpu-all_reduce-ring-ndgb200v6-busbw-only", CLASSES[9], "gb200-nvl72", 1, 4,
              {"NCCL_ALGO": "Ring"}, nccl_version="2.25.1", gpus_per_thread=4,  # version and -g 4: stated, not printed
              approximate="one Azure ND GB200 v6 VM (one compute tray of 4 GPUs) described as a one-tray gb200-nvl72 "
                          "domain; in-place busbw only, sizes from rounded labels; NCCL 2.25.1 is the page's system "
                          "table, not printed by the run",
              not_fitted=_AFTER_THE_FIT),
    Reference("gb200-nvl72-18node-72gpu-all_reduce", CLASSES[9], "gb200-nvl72", 18, 4,
              _COREWEAVE_GB200_ENV, nccl_version="2.26.2",  # stated by the README
              approximate="CoreWeave's rack described by the gb200-nvl72 preset (18 trays in one NVLink domain); the "
                          "run's NCCL_NET_GDR_C2C=1 is not modelled (no network traffic inside one domain); only "
                          "512 MiB-8 GiB printed, as an excerpt without the header; NCCL 2.26.2 is the README's "
                          "statement and the example job's image tag, not printed",
              not_fitted=_AFTER_THE_FIT),
    Reference("gb200-nvl72-2node-8gpu-all_reduce-nvls-oci", CLASSES[9], "gb200-nvl72", 2, 4,
              {"NCCL_NVLS_ENABLE": "1"}, nccl_version="2.26.6",  # the job image's tag, not printed
              approximate="two OCI BM.GPU.GB200.4 trays of one NVLink domain described as a two-tray gb200-nvl72 domain; "
                          "NCCL 2.26.6 is the job image's tag (nccl-tests:pytorch-25.03-nccl-2.26.6-1), not printed "
                          "(modelled as release 2.26.2); the excerpt has no header: 8 ranks from its NCCL INFO lines; which "
                          "of the README's two 2-tray jobs (one with NCCL_IB_DISABLE=1, unused inside one domain) printed it "
                          "is not said",
              not_fitted=_AFTER_THE_FIT),
    Reference("gb200-roce-32node-128gpu-all_reduce-2racks-oci", CLASSES[10], "oci-bm-gpu-gb200-v3-2racks", 32, 4,
              {"NCCL_NVLS_ENABLE": "0", "NCCL_IB_QPS_PER_CONNECTION": "4", "NCCL_IB_SPLIT_DATA_ON_QPS": "0"},
              approximate="OCI's 32 BM.GPU.GB200-v3.4 trays \"across two racks\" described as two NVLink domains of 16 "
                          "trays (the split is not published) joined by a non-blocking RoCEv2 leaf-spine (OCI's topology "
                          "is not published) through 8 x 400G RDMA devices per tray (the count is the job's "
                          "NCCL_IB_HCA, the speed a guess: 200G moves no predicted time by more than 3.2 %); the job's "
                          "NCCL_BUFFSIZE=16777216 (4x the default Simple buffer), NCCL_NET_GDR_C2C=1 and "
                          "NCCL_DMABUF_ENABLE=1 are not modelled; the 1 GiB row (7487 us, nearly 2 GiB's 7758) is a dip "
                          "of the run",
              not_fitted=_AFTER_THE_FIT),
    # 128 ranks, not the device line's 144: every row's busbw / algbw is 2 x 127/128 (tests/nccltests)
    Reference("gb200-nvl72-32node-128gpu-all_reduce-2racks", CLASSES[10], "coreweave-gb200-nvl72-2racks", 32, 4,
              _COREWEAVE_GB200_ENV, nccl_version="2.26.2", n_ranks=128,  # version: stated by the README
              approximate="CoreWeave's \"2 Racks\" run is 128 GPUs by its bus factor (its one device line, rank 143, "
                          "repeats the Single Rack excerpt's host and Pid), described as 32 trays in two NVLink domains "
                          "of 16 (the split is not published); " + _COREWEAVE_RACKS,
              not_fitted=_AFTER_THE_FIT),
    Reference("gb200-nvl72-360node-1440gpu-all_reduce-20racks", CLASSES[10], "gb200-nvl72", 360, 4,
              _COREWEAVE_GB200_ENV, nccl_version="2.26.2",  # stated by the README
              approximate="CoreWeave's 20 racks described by the gb200-nvl72 preset at 360 trays (20 NVLink domains), "
                          "so the fabric's tiers, oversubscription and adaptive routing, which set what a 20-node tree or "
                          "ring meets across it, are guesses; " + _COREWEAVE_RACKS,
              not_fitted=_AFTER_THE_FIT),
    Reference("gb300-nvl72-1node-4gpu-all_reduce-oci", CLASSES[17], "gb300-nvl72", 1, 4, {"NCCL_NVLS_ENABLE": "1"},
              approximate=_OCI_GB300_APPROXIMATE, not_fitted=_AFTER_THE_FIT),
    Reference("gb300-nvl72-2node-8gpu-all_reduce-oci", CLASSES[17], "gb300-nvl72", 2, 4, {"NCCL_NVLS_ENABLE": "1"},
              approximate=_OCI_GB300_APPROXIMATE + "; the page elides the middle device lines", not_fitted=_AFTER_THE_FIT),
    Reference("gb300-nvl72-16node-64gpu-all_reduce-oci", CLASSES[17], "gb300-nvl72", 16, 4, {"NCCL_NVLS_ENABLE": "1"},
              approximate=_OCI_GB300_APPROXIMATE + "; the page elides the middle device lines", not_fitted=_AFTER_THE_FIT),
    Reference("gb300-roce-32node-128gpu-all_reduce-2racks-oci", CLASSES[18], "oci-bm-gpu-gb300-2racks", 32, 4,
              {"NCCL_NVLS_ENABLE": "1", "NCCL_IB_QPS_PER_CONNECTION": "4", "NCCL_IB_SPLIT_DATA_ON_QPS": "0"},
              approximate="OCI's 32 BM.GPU.GB300.4 trays in \"2 Racks\" described as two NVLink domains of 16 trays (the "
                          "split is not published; the page's one-rack run is 16 trays) joined by a non-blocking RoCEv2 "
                          "leaf-spine (OCI's topology is not published) through 8 x 400G RoCE NICs per tray; the run's "
                          "NCCL_BUFFSIZE=16777216, NCCL_NET_GDR_C2C=1 and NCCL_DMABUF_ENABLE=1 are not modelled; every size "
                          "up to 16 MiB takes 484-509 us, a floor the page does not explain; only 512 KiB-16 GiB printed",
              not_fitted=_AFTER_THE_FIT),
    Reference("rtx2080ti-pcie-1node-2gpu-all_reduce", CLASSES[6], "rtx2080ti-pcie-2gpu", 1, 2,
              approximate="NCCL version and CPU not stated (Intel assumed: NCCL's 6/5 PCI overhead through the CPU); "
                          "the SHM path through host memory is inferred from nvidia-smi's NS, not from an NCCL log"),
    Reference("rtx2080ti-pcie-1node-2gpu-alltoall", CLASSES[6], "rtx2080ti-pcie-2gpu", 1, 2,
              approximate="as the all_reduce table of the same machine; the SHM path's budget through the CPU (NCCL's ring "
                          "search through the host, 12 GB/s / (2 GPUs x 6/5)) bounds each GPU's bytes"),
    # non-all_reduce tables found after the fit (held out): all_gather on Google Cloud A4 High (B200, 8 x 400G RoCE, gIB)
    Reference("b200-gcp-a4-roce-2node-16gpu-all_gather", CLASSES[11], "gcp-a4-high-roce", 2, 8, _GIB_A4_ENV,
              approximate="Google Cloud A4 High described by the dgx-b200 template (8 x 400G RoCE); NCCL version not printed "
                          "(the gIB diagnostic image v1.0.3's own libnccl): the default release is predicted; the gIB "
                          "settings are the same repository's A4 defaults, not printed by the run: " + _GIB_NOT_MODELLED,
              not_fitted=_AFTER_THE_FIT),
    Reference("gcp-a3high-tcpx-2node-16gpu-all_gather", CLASSES[12], "gcp-a3-high-tcpx", 2, 8, collective="all_gather",
              approximate="Google Cloud A3 High described by the hgx-h100-4nic template (4 x 200G, one NIC per pair of "
                          "GPUs); the run's Ring/Simple/8-channel TCPX settings are the platform's (a3-highgpu-8g); its "
                          "NCCL_BUFFSIZE=4194304, NCCL_DYNAMIC_CHUNK_SIZE, NCCL_P2P_NET_CHUNKSIZE, NCCL_CROSS_NIC=0 and "
                          "NCCL_P2P_PXN_LEVEL=0 are not modelled; NCCL version not printed (the TCPX plugin image "
                          "v3.1.9's): the default release is predicted; TCPX's per-message cost is the kernel socket "
                          "path's (no public figure); the fabric behind the 4 NICs is not published (non-blocking "
                          "leaf-spine)",
              not_fitted=_AFTER_THE_FIT + _TCPXO_NOT_FITTED),
    # ALCF Polaris (argonne-lcf/alcf-nccl-tests, setup (5)): the first alltoall over a network
    Reference("polaris-slingshot-2node-8gpu-all_gather", CLASSES[13], "polaris-a100-slingshot", 2, 4, _POLARIS_ENV,
              nccl_version="2.18.3", collective="all_gather", approximate=_POLARIS_APPROXIMATE,
              not_fitted=_AFTER_THE_FIT),
    Reference("polaris-slingshot-2node-8gpu-alltoall", CLASSES[13], "polaris-a100-slingshot", 2, 4, _POLARIS_ENV,
              nccl_version="2.18.3", collective="alltoall", approximate=_POLARIS_APPROXIMATE,
              not_fitted=_AFTER_THE_FIT),
    # one H100 node's reduce_scatter and sendrecv (xxrjun/nccl-tests-cluster), NCCL from the header's nccl-library=22902
    Reference("h100-nvswitch-1node-8gpu-reduce_scatter", CLASSES[1], "dgx-h100", 1, 8, nccl_version="2.29.2",
              approximate=_XXRJUN_APPROXIMATE, not_fitted=_AFTER_THE_FIT),
    Reference("h100-nvswitch-1node-8gpu-sendrecv", CLASSES[1], "dgx-h100", 1, 8, nccl_version="2.29.2",
              approximate=_XXRJUN_APPROXIMATE, not_fitted=_AFTER_THE_FIT),
    Reference("h100-nvswitch-1node-8gpu-all_gather", CLASSES[1], "dgx-h100", 1, 8, nccl_version="2.29.2",
              approximate=_XXRJUN_APPROXIMATE, not_fitted=_AFTER_THE_FIT),
    Reference("h100-nvswitch-1node-8gpu-alltoall", CLASSES[1], "dgx-h100", 1, 8, nccl_version="2.29.2",
              approximate=_XXRJUN_APPROXIMATE, not_fitted=_AFTER_THE_FIT),
    # H100 over InfiniBand, 2 x 8 GPUs, NCCL_ALGO=Ring, NCCL 2.19.3 (wutz/k8s-in-action)
    Reference("h100-ib-2node-16gpu-all_reduce-ring-nccl219", CLASSES[0], "dgx-h100", 2, 8, {"NCCL_ALGO": "Ring"},
              nccl_version="2.19.3",  # the job image's tag at the commit that publishes the table, not printed
              approximate="16 H100 with 8 x 400G InfiniBand per node (the README's words) described by the dgx-h100 preset; "
                          "NCCL 2.19.3 is the job image's tag, not printed; the job's NCCL_CROSS_NIC=1 is not modelled; the "
                          "server model and switch layout are not stated; only 512 MiB-8 GiB printed, without the header",
              not_fitted=_AFTER_THE_FIT),
    # dstack's cluster examples (dstackai/dstack examples/clusters/*/README.md), both in dstack's default image (NCCL 2.26.2)
    Reference("h100-ib-2node-16gpu-all_reduce-nebius", CLASSES[0], "dgx-h100", 2, 8, nccl_version="2.26.2",
              approximate="Nebius GPU-cluster nodes described by the dgx-h100 preset: the run's GPU model is not stated (the "
                          "page's VM fleet asks H100:8; an H200 node has the same NVLink4 and NICs in gpuwait's templates), nor "
                          "the NICs (8 x 400G NDR assumed) or the fabric; NCCL 2.26.2 is dstack's default image's build "
                          "(docker/base/Dockerfile), not printed",
              not_fitted=_AFTER_THE_FIT),
    Reference("b200-ib-2node-16gpu-all_reduce-lambda", CLASSES[15], "lambda-1cc-b200-ib", 2, 8, nccl_version="2.26.2",
              approximate="Lambda 1-Click Cluster B200 nodes described by the dgx-b200 template on an NDR InfiniBand "
                          "leaf-spine; the 8 x 400G HCAs per node are Lambda's page, not the source, and the fabric is not "
                          "published; NCCL 2.26.2 is the nccl-tests header's nccl-library=22602 (no version line)",
              not_fitted=_AFTER_THE_FIT),
    # one B200 cluster at 2, 4 and 8 nodes, sendrecv 1 KiB-256 MiB, NCCL 2.29.7 printed (togethercomputer/together-nccl-tests)
    Reference("b200-ib-2node-16gpu-sendrecv-together", CLASSES[15], "together-dgxc-b200-ib", 2, 8, _TOGETHER_ENV,
              collective="sendrecv", approximate=_TOGETHER_APPROXIMATE, not_fitted=_AFTER_THE_FIT),
    Reference("b200-ib-4node-32gpu-sendrecv-together", CLASSES[15], "together-dgxc-b200-ib", 4, 8, _TOGETHER_ENV,
              collective="sendrecv", approximate=_TOGETHER_APPROXIMATE, not_fitted=_AFTER_THE_FIT),
    Reference("b200-ib-8node-64gpu-sendrecv-together", CLASSES[15], "together-dgxc-b200-ib", 8, 8, _TOGETHER_ENV,
              collective="sendrecv",
              approximate=_TOGETHER_APPROXIMATE + "; known gap: 26 GB/s from 8 MiB against 43-44 on 2 and 4 nodes, the "
                          "contention the repository's report finds from 8 nodes on any node set (14.5 GB/s from 16), which "
                          "the non-blocking fabric described does not have",
              not_fitted=_AFTER_THE_FIT),
    # one cluster at two node counts (xxrjun/nccl-tests-cluster example-cluster01): 2 and 10 nodes, 1 and 8 GPUs per node
    Reference("h100-rdma-10node-80gpu-all_reduce", CLASSES[0], "dgx-h100", 10, 8, nccl_version="2.29.2",
              approximate=_XXRJUN_NET_APPROXIMATE, not_fitted=_AFTER_THE_FIT),
    Reference("h100-rdma-10node-10gpu-all_reduce-1gpn", CLASSES[0], "dgx-h100", 10, 1, nccl_version="2.29.2",
              approximate=_XXRJUN_NET_APPROXIMATE + "; one GPU (device 0) per node", not_fitted=_AFTER_THE_FIT),
    Reference("h100-rdma-2node-2gpu-all_reduce-1gpn-smoke", CLASSES[0], "dgx-h100", 2, 1, nccl_version="2.29.2",
              approximate=_XXRJUN_NET_APPROXIMATE + "; one GPU (device 0) per node; the repository's smoke test: 5 timed "
                          "calls after 2 warm-up ones per size, 32-512 MiB only", not_fitted=_AFTER_THE_FIT),
    Reference("h100-rdma-10node-80gpu-alltoall", CLASSES[0], "dgx-h100", 10, 8, nccl_version="2.29.2",
              approximate=_XXRJUN_NET_APPROXIMATE, not_fitted=_AFTER_THE_FIT),
    # H200 over RoCE, 2 x 8 GPUs: Google A3 Ultra (gIB), Dell XE9680 on Spectrum-X; both NCCL versions printed
    Reference("h200-gcp-a3ultra-roce-2node-16gpu-all_gather", CLASSES[14], "gcp-a3-ultra-roce", 2, 8, _GIB_A4_ENV,
              collective="all_gather",
              approximate="Google Cloud A3 Ultra described by the dgx-h200 template (8 x 400G RoCE, one NIC per GPU); the gIB "
                          "settings are the A4 High defaults of the same plugin, not printed by the run: " + _GIB_NOT_MODELLED,
              not_fitted=_AFTER_THE_FIT),
    Reference("h200-spectrumx-2node-16gpu-all_reduce", CLASSES[14], "dell-xe9680-h200-spectrumx", 2, 8,
              {"NCCL_MIN_NCHANNELS": "32", "NCCL_IB_QPS_PER_CONNECTION": "2", "NCCL_IB_SPLIT_DATA_ON_QPS": "0"},
              approximate="two Dell XE9680 (HGX H200) described by the dgx-h200 template with 8 x 400GbE BlueField-3 SuperNIC "
                          "rails; Spectrum-X's switch layout is not published (a non-blocking rail-optimized leaf-spine with "
                          "adaptive routing assumed); the run's NCCL_IB_ADAPTIVE_ROUTING=1 and NCCL_P2P_NET_CHUNKSIZE are not "
                          "modelled; one process drives each node's 8 GPUs (-g 8)",
              not_fitted=_AFTER_THE_FIT),
    # OCI BM.GPU.B4.8 (A100-40GB, 16 RoCE ports), 2 x 8, NCCL_ALGO=Ring, NCCL 2.29.3 printed (oracle-quickstart/oci-hpc-oke
    # docs/running-nccl-rccl-tests-from-slurm-operator.md @f297ea08): the same job's shape case sets QPs 4 and Ring
    Reference("a100-oci-b4-2node-16gpu-roce-all_reduce-ring", CLASSES[2], "oci-a100-roce", 2, 8,
              {"NCCL_ALGO": "Ring", "NCCL_IB_QPS_PER_CONNECTION": "4"},
              approximate="OCI BM.GPU.B4.8 described by the oci-a100-roce preset (BM.GPU4.8: 8 x A100-SXM4-40GB, 16 x 100G "
                          "RoCE ports): the 16 ports are the run's NCCL_IB_HCA, their speed is not stated (100 Gb/s, as "
                          "BM.GPU4.8); the host CPU and OCI's cluster-network topology are not published (the preset's); "
                          "only 1-8 GiB printed (no floor)",
              not_fitted=_AFTER_THE_FIT),
    # one B200 node of MGHPCC's AICR cluster (mghpcc/aicr-benchmarks out-1node/nvhpc-26.3-b0027-9175 @32b65655), -g 8,
    # 1 MiB-16 GiB by factors of 4, NCCL 2.29.3 from the header's nccl-library=22903
    Reference("b200-nvswitch-1node-8gpu-all_reduce", CLASSES[16], "aicr-b200-1node", 1, 8, nccl_version="2.29.3",
              approximate=_AICR_B200_APPROXIMATE, not_fitted=_AFTER_THE_FIT),
    Reference("b200-nvswitch-1node-8gpu-all_gather", CLASSES[16], "aicr-b200-1node", 1, 8, nccl_version="2.29.3",
              collective="all_gather", approximate=_AICR_B200_APPROXIMATE, not_fitted=_AFTER_THE_FIT),
]


# --------------------------------------------------------------------------------------------
# Measured and predicted curves
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Curve:
    """busbw (GB/s) and time (us, NaN when not printed) per size, with the rank count."""

    sizes: np.ndarray
    busbw: np.ndarray
    time_us: np.ndarray
    n_ranks: int
    collective: str


_LABEL = re.compile(r"^\|\s*(\d+)([KMG])\s*\|\s*([\d.]+)\s*\|")


def busbw_only_curve(text: str, n_ranks: int) -> Curve:
    """The 2-column markdown table (size label | in-place busbw): labels are the -f 2 sweep from 1 KiB,
    printed rounded ("65K" for 65536), so the i-th row is 1024 * 2**i bytes."""
    busbw = [float(m[3]) for line in text.splitlines() if (m := _LABEL.match(line.strip()))]
    sizes = 1024 * 2 ** np.arange(len(busbw))
    return Curve(sizes, np.array(busbw), np.full(len(busbw), np.nan), n_ranks, "all_reduce")


_SUMMARY_ROW = re.compile(r"^\|\s*\**(\d+)([KMG])B\**\s*\|")
#: a summary's column headers, by the quantity they hold
_SUMMARY_COLUMNS = {"time": re.compile(r"^Time \(μs\)$"), "busbw": re.compile(r"^Bus BW \(GB/s\)$")}


def summary_curve(text: str, n_ranks: int, collective: str) -> Curve:
    """A markdown summary of an nccl-tests run (a size label such as ``64KB`` or ``**8GB**``, then columns named
    by their header row, in any order: ``Time (μs)`` and ``Bus BW (GB/s)`` are read). The labels are the -f 2
    sweep's powers of two (64KB = 65536 B), which the printed algbw = size / time confirms
    (tests/nccltests/test_reference_tables.py); one time per size, the run's only column."""
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("| Size")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    column = {name: next(i for i, cell in enumerate(header) if pattern.match(cell))
              for name, pattern in _SUMMARY_COLUMNS.items()}
    sizes, busbw, time_us = [], [], []
    for line in text.splitlines():
        if not (m := _SUMMARY_ROW.match(line.strip())):
            continue
        cells = [cell.strip().strip("*") for cell in line.strip().strip("|").split("|")]
        sizes.append(int(m[1]) * {"K": 2**10, "M": 2**20, "G": 2**30}[m[2]])
        busbw.append(float(cells[column["busbw"]]))
        time_us.append(float(cells[column["time"]]))
    return Curve(np.array(sizes), np.array(busbw), np.array(time_us), n_ranks, collective)


def parsed_log(ref: Reference):
    """The table's nccl-tests log, parsed once (cached: the scores and the one-off rows both read it). A log that
    names no collective and whose columns do not tell it (all_gather with ``-c 0`` prints N/A in both ``#wrong``
    columns, as alltoall does) is read as ``ref.collective``."""
    if ref.stem not in _LOGS:
        log = parse_nccl_tests_log(ref.path.read_text(), n_ranks=ref.n_ranks)
        if log.collective is None:
            log = parse_nccl_tests_log(ref.path.read_text(), collective=ref.collective, n_ranks=ref.n_ranks)
        _LOGS[ref.stem] = log
    return _LOGS[ref.stem]


_LOGS: dict = {}


def measured(ref: Reference) -> Curve:
    if ref.path.suffix == ".txt":
        return busbw_only_curve(ref.path.read_text(), ref.servers * ref.gpus)
    if ref.path.suffix == ".md":
        return summary_curve(ref.path.read_text(), ref.servers * ref.gpus, ref.collective)
    log = parsed_log(ref)
    rows = [r for r in log.rows if r.size_bytes > 0 and _printable_today(r, str(log.collective), int(log.n_ranks))]
    return Curve(np.array([r.size_bytes for r in rows]), np.array([r.steady_busbw_GBps for r in rows]),
                 np.array([r.steady_time_us for r in rows]), int(log.n_ranks), str(log.collective))


def _printable_today(row, collective: str, n_ranks: int) -> bool:
    """Whether today's nccl-tests prints this row's size when asked for it: builds before the 16-byte per-rank
    alignment of all_gather, reduce_scatter and alltoall (``(count/nranks) & -(16/eltSize)``) printed sizes of 1-3
    elements per rank (alltoall at 8 ranks: 32 and 64 B), which the predicted sweep, as today's nccl-tests, never
    runs; those rows are not scored."""
    return size_and_count(collective, row.size_bytes, row.dtype, n_ranks).size_bytes == row.size_bytes


def sweep_of(ref: Reference, meas: Curve):
    """``gpuwait perf OP -b MIN -e MAX -f 2`` on the table's cluster (cached: the fits re-read it)."""
    key = ref.stem
    if key not in _SWEEPS:
        lo, hi = requested_range(ref, meas)
        _SWEEPS[key] = perf_sweep(meas.collective, SweepArgs(min_bytes=lo, max_bytes=hi, step_factor=2),
                                  ref.cluster_arg(), ref.servers, ref.gpus, ref.env, ref.version(),
                                  gpus_per_thread=ref.threads_gpus())
    return _SWEEPS[key]


_SWEEPS: dict = {}


def requested_range(ref: Reference, meas: Curve) -> tuple[int, int]:
    """The first and last sizes nccl-tests was asked for: it doubles the requested size (``-b``, ``-f 2``) and rounds
    each one to whole elements per rank, so where the rounding moves a size (all_gather, reduce_scatter and alltoall on
    a rank count that is not a power of two: 80 ranks print 33553920 for 32 MiB and 134216960 for 128 MiB) doubling
    the printed size would sweep other sizes; where no header says what was asked, the printed sizes."""
    lo, hi = int(meas.sizes[0]), int(meas.sizes[-1])
    config = parsed_log(ref).config if ref.path.suffix == ".log" else None
    if config is None or config.min_bytes <= 0 or config.step_factor != 2:
        return lo, hi
    asked = [config.min_bytes * 2**k for k in range(64) if config.min_bytes * 2**k <= 2 * hi]
    dtype = parsed_log(ref).rows[0].dtype

    def first_asked(size: int) -> int:
        return next((r for r in asked if size_and_count(meas.collective, r, dtype, meas.n_ranks).size_bytes == size), size)

    return first_asked(lo), first_asked(hi)


def predicted(ref: Reference, meas: Curve, adjustment: Adjustment | None = None) -> tuple[Curve, list[dict]]:
    """What ``gpuwait perf OP -b MIN -e MAX -f 2`` prints for the table's cluster; with ``adjustment``,
    the same sweep with the physical parameters moved from the model's physical defaults."""
    sweep = sweep_of(ref, meas)
    if sweep.n_ranks != meas.n_ranks:
        raise SystemExit(f"{ref.stem}: {sweep.n_ranks} predicted ranks, {meas.n_ranks} in the table")
    by_size = {r.size_bytes: i for i, r in enumerate(sweep.rows)}
    index = [by_size[int(s)] for s in meas.sizes]
    if adjustment is None:
        time_us = np.array([sweep.rows[i].oop_time_us for i in index])
    else:
        costs = stack_costs([sweep.estimates[i].costs for i in index])
        time_us = pipelined_times_s(costs, adjustment.apply(sweep.unfitted_params)) * 1e6
    factor = busbw_factor(meas.collective, meas.n_ranks)
    busbw = meas.sizes / (time_us * 1e3) * factor
    return Curve(meas.sizes, busbw, time_us, sweep.n_ranks, meas.collective), sweep.choices


def observations(ref: Reference) -> list[Observation]:
    """Every size of the table with a measured time (from busbw where only busbw is printed)."""
    meas = measured(ref)
    sweep = sweep_of(ref, meas)
    by_size = {r.size_bytes: i for i, r in enumerate(sweep.rows)}
    factor = busbw_factor(meas.collective, meas.n_ranks)
    out = []
    for size, busbw, time_us in zip(meas.sizes, meas.busbw, meas.time_us, strict=True):
        t_s = time_us * 1e-6 if np.isfinite(time_us) else size * factor / (busbw * 1e9)
        est = sweep.estimates[by_size[int(size)]]
        out.append(Observation(est.costs, sweep.unfitted_params, float(t_s), ref.stem))
    return out


# --------------------------------------------------------------------------------------------
# Scores
# --------------------------------------------------------------------------------------------

def ramp_size(curve: Curve, fraction: float) -> str:
    """The first size whose busbw reaches ``fraction`` of the curve's highest."""
    i = int(np.argmax(curve.busbw >= fraction * curve.busbw.max()))
    return ("<=" if i == 0 else "") + size_label(int(curve.sizes[i]))


def size_label(size: int) -> str:
    for unit, scale in (("G", 2**30), ("M", MiB), ("K", KiB)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


@dataclass(frozen=True)
class Score:
    ref: Reference
    busbw_errors: np.ndarray   # |pred - meas| / meas, sizes >= 1 MiB
    floor_error: float         # median (pred - meas) / meas of the time, sizes <= 64 KiB; NaN without times
    ramp: tuple[str, str, str, str]  # measured 50 %, predicted 50 %, measured 90 %, predicted 90 %
    plateau: tuple[float, float]     # highest busbw, measured and predicted
    algorithms: str


def score(ref: Reference, adjustment: Adjustment | None = None) -> Score:
    meas = measured(ref)
    pred, choices = predicted(ref, meas, adjustment)
    big = meas.sizes >= MiB
    busbw_errors = np.abs(pred.busbw[big] - meas.busbw[big]) / meas.busbw[big]
    small = (meas.sizes <= 64 * KiB) & np.isfinite(meas.time_us)
    floor = float(np.median(pred.time_us[small] / meas.time_us[small] - 1)) if small.any() else float("nan")
    ramp = (ramp_size(meas, 0.5), ramp_size(pred, 0.5), ramp_size(meas, 0.9), ramp_size(pred, 0.9))
    used = sorted({f"{c['algorithm']}/{c['protocol']}" for c in choices if c["size_bytes"] >= MiB})
    return Score(ref, busbw_errors, floor, ramp, (float(meas.busbw.max()), float(pred.busbw.max())), ", ".join(used))


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def pct(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{100 * x:.0f} %"


def signed_pct(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{100 * x:+.0f} %"


def pooled_errors(scores: list[Score]) -> tuple[int, float, float]:
    """(sizes, median, p95) of the busbw errors of every size >= 1 MiB of ``scores``, each size counted once
    (NaN median and p95 without any)."""
    errors = np.concatenate([s.busbw_errors for s in scores]) if scores else np.array([])
    if not errors.size:
        return 0, float("nan"), float("nan")
    return errors.size, float(np.median(errors)), float(np.percentile(errors, 95))


def class_lines(scores: list[Score]) -> list[str]:
    lines = ["## Per hardware class", "",
             "busbw error over every size >= 1 MiB of the class's scored tables (approximate descriptions included).",
             "", "| class | tables scored | sizes | median | p95 | not describable |", "|---|---|---|---|---|---|"]
    for name in CLASSES:
        mine = [s for s in scores if s.ref.hw_class == name]
        missing = sum(1 for r in REFERENCES if r.hw_class == name and r.not_describable)
        n_sizes, med, p95 = pooled_errors(mine)
        lines.append(f"| {name} | {len(mine)} | {n_sizes} | {pct(med)} | {pct(p95)} | {missing} |")
    # the target reads over every size of its 18 tables: the classes pooled, each size counted once;
    # the tables found after the fit (_AFTER_THE_FIT) apart, then everything
    found_later = [s for s in scores if s.ref.not_fitted.startswith(_AFTER_THE_FIT)]
    for label, group in ((f"pooled: the {len(scores) - len(found_later)} tables before the held-out additions",
                          [s for s in scores if s not in found_later]),
                         (f"pooled: the {len(found_later)} found after the fit (held out)", found_later),
                         (f"pooled: all {len(scores)}", scores)):
        n_sizes, med, p95 = pooled_errors(group)
        lines.append(f"| {label} | {len(group)} | {n_sizes} | {pct(med)} | {pct(p95)} | - |")
    return lines


def table_lines(scores: list[Score]) -> list[str]:
    lines = ["## Every scored table", "",
             "busbw error: |pred - meas| / meas for sizes >= 1 MiB. Floor: median (pred - meas) / meas of the time for "
             "sizes <= 64 KiB. Ramp: the first size reaching 50 % / 90 % of the table's highest busbw, measured -> "
             "predicted. Plateau: highest busbw (GB/s), measured -> predicted.", ""]
    for name in CLASSES:
        mine = [s for s in scores if s.ref.hw_class == name]
        if not mine:
            continue
        lines += [f"### {name}", "",
                  "| table | described as | busbw median | busbw worst | floor | ramp 50 % | ramp 90 % | plateau | "
                  "model's choice >= 1 MiB |", "|---|---|---|---|---|---|---|---|---|"]
        for s in mine:
            lines.append(f"| {s.ref.stem} | {s.ref.describe()} | {pct(np.median(s.busbw_errors))} | "
                         f"{pct(s.busbw_errors.max())} | {signed_pct(s.floor_error)} | {s.ramp[0]} -> {s.ramp[1]} | "
                         f"{s.ramp[2]} -> {s.ramp[3]} | {s.plateau[0]:.0f} -> {s.plateau[1]:.0f} | {s.algorithms} |")
        approx = [s for s in mine if s.ref.approximate]
        if approx:
            lines += [""] + [f"- {s.ref.stem}: approximate: {s.ref.approximate}." for s in approx]
        lines += [f"- {s.ref.stem}: scored, kept out of every fit: {s.ref.not_fitted}." for s in mine
                  if s.ref.not_fitted]
        lines.append("")
    return lines


#: a column more than this much slower than the other carries a one-off cost the doc names
ONE_OFF_RATIO = 1.2


def one_off_lines() -> list[str]:
    """The rows whose two timings differ by more than ONE_OFF_RATIO, and which one the score takes."""
    lines = ["## Rows with a one-off cost in one column", "",
             f"Sizes whose out-of-place and in-place times differ by more than {ONE_OFF_RATIO:g}x; the score takes "
             "the faster (nccl-tests warmed up only its smallest and largest sizes before commit f2015cb, "
             "2025-08-25).", "", "| table | size | out-of-place us | in-place us | scored |", "|---|---|---|---|---|"]
    for ref in (r for r in REFERENCES if not r.not_describable and r.path.suffix == ".log"):
        for row in parsed_log(ref).rows:
            slow, fast = max(row.oop_time_us, row.ip_time_us), min(row.oop_time_us, row.ip_time_us)
            if row.size_bytes > 0 and fast > 0 and slow > ONE_OFF_RATIO * fast:
                column = "in-place" if row.steady_time_us == row.ip_time_us else "out-of-place"
                lines.append(f"| {ref.stem} | {size_label(row.size_bytes)} | {row.oop_time_us:g} | "
                             f"{row.ip_time_us:g} | {column} |")
    return lines + [""]


#: a size this much faster than the size before it, and faster than the one before that (so a one-row stall
#: is not read as a switch), ran a faster algorithm or protocol than the smaller sizes did
SWITCH_DROP = 0.95
#: an out-of-place time this many times the in-place one at the same size: a one-off cost in the first timed loop of
#: that size. Below it, run-to-run noise in the tables reaches 1.3x (h100-efa 32 KiB)
FIRST_CALL_RATIO = 1.4
#: NCCL connects an algorithm on its first use from 2.22 on (NCCL_RUNTIME_CONNECT, default 1: ``initAlgoChannels``,
#: ncclPrepareTasks, src/enqueue.cc v2.22.3-1); before, every algorithm is connected at init
RUNTIME_CONNECT_SINCE = (2, 22)
#: tables whose nccl-tests (v2.16.8 on, commit f2015cb) ran its warm-up at every size of the sweep before timing any:
#: the command runs /nccl-tests-2.17.1 (eth-cscs/cscs-docs nccl.md)
WARMUP_EVERY_SIZE = {"gh200-slingshot-2node-8gpu-all_reduce", "gh200-nooptnet-2node-8gpu-all_reduce"}
#: tables whose NCCL may have run a tuner plugin that replaces its cost model: no signal there is ruled out by NCCL's
#: own formula. aws-ofi-nccl's tuner leaves runs of at most 2 nodes to NCCL in v1.9.1-aws and v1.13.0-aws on
#: (src/tuner/nccl_ofi_tuner.c, nccl_ofi_model.c), and its v1.10-v1.12 regions for 8 GPUs per node start at 16 ranks
#: (src/tuner/nccl_ofi_tuner.c): a 1-node p5 run is NCCL's own choice, a 2-node one (16 ranks) may not be. None of
#: the tables: the p5 Batch run has 8 ranks, and the 2-node p5 EFA run's NCCL (2.19.4 or 2.20.3; 2.18 has no tuner
#: interface) loads a tuner only from NCCL_TUNER_PLUGIN (ncclLoadTunerPlugin, src/misc/tuner.cc v2.20.3-1), which the
#: README's sbatch and container (aws-samples/awsome-distributed-training 88c2e71b) do not set
TUNER_PLUGIN: set[str] = set()
#: bytes per peer up to which NCCL's p2p path (all-to-all, send/recv) makes the same choice at every size: one channel
#: (a peer's bytes are split in parts of at least p2pChunkSize/8 = 16 KiB, 2.18-2.30, src/enqueue.cc
#: calcP2pChunkSize / addP2pToPlan) in LL (NCCL_P2P_LL_THRESHOLD, default 16384 bytes per peer)
P2P_FIXED_CHOICE_BYTES = 16384
#: NCCL's own choices, published for one hardware class from NCCL_DEBUG_SUBSYS=TUNING, by (cluster, servers, GPUs
#: per server, collective): the spans (smallest size, largest size, algorithm/protocol), the NCCL release that printed
#: them and the source. A signal whose size and half lie in one span, on a table of that class that sets neither
#: NCCL_ALGO nor NCCL_PROTO, is no choice change. One 8 x H100 node with NVLS: an HGX H100 (Dell XE9680) whose poster
#: read TUNING's output, confirmed by NVIDIA in the same thread
PUBLISHED_CHOICES: dict[tuple[str, int, int, str], tuple[tuple[tuple[int, int, str], ...], str, str]] = {
    ("dgx-h100", 1, 8, "all_reduce"): (
        ((8, 2**20, "ring/LL"), (2**21, 16 * 2**30, "nvls/Simple")), "2.26.2",
        "NVIDIA/nccl-tests#309, qoofyk 2025-05-23 (Dell XE9680, 8 x H100, NCCL 2.26.2, single node: \"8B~1MB: uses Algo "
        "RING proto LL\", \"2MB~16GB uses Algo NVLS proto SIMPLE\"; NVIDIA's kiskra-nvidia: \"Yes\")"),
}
#: NCCL's formula keeps its choice between two sizes when the choice's lead over the next-best at the smaller size
#: exceeds this many times the choice's bytes term at the larger one (every other term of NCCL's time is a latency,
#: the same at both sizes): the choice then holds even if every bandwidth NCCL reads were this many times lower
LATENCY_LEAD_FACTOR = 10.0


def seen_switches(ref: Reference) -> list[tuple[int, str]]:
    """The sizes where the published table shows NCCL changing its algorithm or protocol, with the evidence:
    a drop in time as the size grows (SWITCH_DROP), or a one-off cost in the out-of-place column
    (FIRST_CALL_RATIO; neither the first nor the last row, which nccl-tests' warm-up runs)."""
    if ref.path.suffix != ".log":
        return []
    rows = [r for r in parsed_log(ref).rows if r.size_bytes > 0]
    seen = []
    for k, row in enumerate(rows):
        t = row.steady_time_us
        if k >= 2 and t < SWITCH_DROP * rows[k - 1].steady_time_us and t < rows[k - 2].steady_time_us:
            seen.append((row.size_bytes, f"time falls: {rows[k - 1].steady_time_us:g} -> {t:g} us"))
        elif 0 < k < len(rows) - 1 and row.ip_time_us > 0 and row.oop_time_us > FIRST_CALL_RATIO * row.ip_time_us:
            seen.append((row.size_bytes, f"one-off: out-of-place {row.oop_time_us:g} us, in-place "
                                         f"{row.ip_time_us:g} us"))
    return seen


def _steady(row) -> bool:
    """Both columns within ONE_OFF_RATIO of each other: neither carries a one-off cost."""
    fast, slow = sorted((row.oop_time_us, row.ip_time_us))
    return fast > 0 and slow <= ONE_OFF_RATIO * fast


def drop_not_a_switch(ref: Reference, size: int) -> str:
    """Why a fall in time at ``size`` is not a switch (empty if it may be one). NCCL's choice does not depend on the
    buffers being in place (getAlgoInfo reads the function, type, op and byte count: src/enqueue.cc), so a switch
    speeds both columns; and a fall measured from a row with a one-off cost in either column, which the steady rows
    before it do not show, is that row's cost going away."""
    rows = [r for r in parsed_log(ref).rows if r.size_bytes > 0]
    k = next(i for i, r in enumerate(rows) if r.size_bytes == size)
    row, before = rows[k], rows[k - 1]
    for column, now, then in (("out-of-place", row.oop_time_us, before.oop_time_us),
                              ("in-place", row.ip_time_us, before.ip_time_us)):
        if now >= then:
            return (f"not a switch: the {column} column does not fall ({then:g} -> {now:g} us); NCCL's choice is the "
                    "same for both columns (src/enqueue.cc getAlgoInfo)")
    steady = [r for r in rows[:k] if _steady(r)]
    if not _steady(before) and steady and row.steady_time_us >= SWITCH_DROP * steady[-1].steady_time_us:
        return (f"not a switch: the fall is from {size_label(before.size_bytes)}'s one-off cost (out-of-place "
                f"{before.oop_time_us:g}, in-place {before.ip_time_us:g} us); the last steady size, "
                f"{size_label(steady[-1].size_bytes)}, ran {steady[-1].steady_time_us:g} us")
    return ""


def predicted_switches(choices: list[dict]) -> list[tuple[int, str]]:
    """The sizes where the model's (algorithm, protocol) changes, and the choice it changes to."""
    changes = choice_switches([(c["size_bytes"], c["algorithm"], c["protocol"]) for c in choices])
    return [(change["size_bytes"], change["to"]) for change in changes]


def first_uses(choices: list[dict], version: tuple[int, ...], warmup_every_size: bool) -> list[tuple[int, str]]:
    """The sizes whose timed loop is the first after NCCL connected an algorithm, and the algorithm.

    nccl-tests times a size only after one untimed call at it (BenchTime's "Sync" call, src/common.cu since
    cbe7f65, 2019) and NCCL connects an algorithm before launching that call (ncclCollPreconnectFunc, src/group.cc
    v2.22.3-1 on); yet the published tables time the connection's sizes slower out-of-place than in-place (the 8 B
    row of the 2- and 4-node H100 tables, warmed up and still 2.4-2.8x): the timed loop after a connection pays too,
    as calls after an on-demand connection stay slow for a while (NVIDIA/nccl#1487, a maintainer's DGX H100 send/recv:
    214 ms with the connection, 14 us next, then 3-5 us; NVIDIA/nccl#415: the first few calls 10-100 ms each).
    Before NCCL 2.22 every algorithm connects at init; nccl-tests before v2.16.8 warms up only the smallest and
    largest size (src/common.cu TimeTest), from v2.16.8 every size of the sweep."""
    if version < RUNTIME_CONNECT_SINCE or warmup_every_size or not choices:
        return []
    # NVLSTree's connection sets up NVLS's buffers too (ncclPrepareTasks marks both)
    also = {"nvls_tree": {"nvls"}}
    connected = set()
    for c in (choices[0], choices[-1]):
        connected |= {c["algorithm"], *also.get(c["algorithm"], ())}
    uses = []
    for c in choices:
        if c["algorithm"] not in connected:
            connected |= {c["algorithm"], *also.get(c["algorithm"], ())}
            uses.append((c["size_bytes"], f"{c['algorithm']} connected"))
    return uses


def _candidates_us(predictor, collective: str, n_bytes: int) -> dict[tuple[str, str], tuple[float, float]]:
    """NCCL's formula for every (algorithm, protocol) the table's env lets NCCL pick: (time, bytes term) in us; the
    candidates ``tuning.choose`` takes the cheapest of (:func:`gpuwait.collectives.tuning.candidates`)."""
    env = predictor.env
    table = candidates(predictor.tuning_inputs(collective), n_bytes, env.algo, env.proto)
    return {pair: (pred.time_us, pred.time_us - pred.latency_us) for pair, pred in table.items() if pred.supported}


def formula_holds(predictor, collective: str, size: int, version: str | None) -> str:
    """Why NCCL's own formula cannot change its choice between ``size``/2 and ``size`` (empty if it can): the choice's
    lead at ``size``/2 against its bytes term at ``size`` (LATENCY_LEAD_FACTOR). All-to-all and send/recv take NCCL's
    p2p path, outside the formula: empty."""
    if collective in ("alltoall", "sendrecv"):
        per_peer = size if collective == "sendrecv" else size // max(predictor.comm.n_ranks, 1)
        if per_peer > P2P_FIXED_CHOICE_BYTES:
            return ""
        return (f"not a switch: {per_peer} B per peer: NCCL's p2p path runs one channel in LL at every size up "
                f"to {P2P_FIXED_CHOICE_BYTES // 1024} KiB per peer (src/enqueue.cc addP2pToPlan), so the fall is not "
                "its choice")
    below, at = _candidates_us(predictor, collective, size // 2), _candidates_us(predictor, collective, size)
    best = min(below, key=lambda k: below[k][0])
    if min(at, key=lambda k: at[k][0]) != best or len(below) < 2:
        return ""
    lead_us = min(t for k, (t, _) in below.items() if k != best) - below[best][0]
    bytes_us = at[best][1]
    if lead_us <= LATENCY_LEAD_FACTOR * bytes_us:
        return ""
    tags = predictor.env.release.tags
    release = version or f"{tags[0]}..{tags[1]} (the table prints none)"
    return (f"not a switch: NCCL {release}: its formula keeps {best[0]}/{best[1]}, {lead_us:.1f} us "
            f"ahead at {size_label(size // 2)} against a bytes term of {bytes_us:.3f} us at {size_label(size)}")


def published_choice(ref: Reference, size: int, collective: str) -> str:
    """Why a signal at ``size`` is no choice change by NCCL's choices published for the table's hardware
    (PUBLISHED_CHOICES); empty where none covers it."""
    entry = PUBLISHED_CHOICES.get((str(ref.cluster), ref.servers, ref.gpus, collective))
    if entry is None or {"NCCL_ALGO", "NCCL_PROTO"} & set(ref.env):
        return ""
    spans, release, source = entry
    span = next((s for s in spans if s[0] <= size // 2 and size <= s[1]), None)
    if span is None:
        return ""
    table = f" (the table's: {ref.version()})" if ref.version() and ref.version() != release else ""
    return (f"not a switch: NCCL_DEBUG_SUBSYS=TUNING on the same hardware, NCCL {release}{table}, reports {span[2]} at "
            f"every size from {size_label(span[0])} to {size_label(span[1])}: {source}")


def _nearest(model: list[tuple[int, str]], size: int) -> tuple[tuple[int, str] | None, bool]:
    near = min(model, key=lambda m: abs(np.log2(m[0] / size)), default=None)
    return near, near is not None and abs(np.log2(near[0] / size)) <= 1


def switch_verdict(ref: Reference, size: int, evidence: str, choices: list[dict], predictor) -> tuple[str, str]:
    """The mechanism's prediction nearest a seen signal, and whether it lies within 2x ("yes", "no", or why the
    signal is not an NCCL choice change)."""
    one_off = evidence.startswith("one-off")
    warmed = ref.stem in WARMUP_EVERY_SIZE
    if one_off:
        model = first_uses(choices, predictor.env.release.version_key, warmed)
    else:
        model = predicted_switches(choices)
    near, ok = _nearest(model, size)
    where = f"{size_label(near[0])} ({near[1]})" if near else "none"
    if one_off and warmed:
        return where, ("not a switch: this nccl-tests (>= v2.16.8) warmed up every size before timing, so no "
                       "timed loop follows a connection")
    if one_off and predictor.env.release.version_key < RUNTIME_CONNECT_SINCE:
        return where, (f"not a switch: NCCL {ref.version() or predictor.env.release.tags[0]} connects every algorithm "
                       "at init (runtime connection came in 2.22), so no timed loop follows a connection")
    noise = "" if one_off else drop_not_a_switch(ref, size)
    if noise or ok:
        return where, noise or "yes"
    collective = measured(ref).collective  # a tuner plugin replaces NCCL's formula and what its TUNING printed
    why = "" if ref.stem in TUNER_PLUGIN else (formula_holds(predictor, collective, size, ref.version())
                                               or published_choice(ref, size, collective))
    return where, why or "no"


def switch_lines(refs: list[Reference]) -> tuple[list[str], int, int]:
    """Each switch a table shows, beside the mechanism's nearest prediction, and how many lie within a factor of 2."""
    lines = ["## Algorithm switch sizes", "",
             "Published nccl-tests tables do not print NCCL's choice (NCCL_DEBUG_SUBSYS=TUNING does); a switch shows "
             f"only where the time falls as the size grows (by more than {100 * (1 - SWITCH_DROP):.0f} %, below the two "
             "sizes before it) or where a size's out-of-place loop pays a one-off cost (over "
             f"{FIRST_CALL_RATIO:g}x in-place). nccl-tests times a size only after one untimed call at it (src/common.cu "
             "BenchTime), NCCL loads every kernel at init (ncclInitKernelsForDevice queries each one's attributes, "
             "src/enqueue.cc) and, from 2.22 on, connects an algorithm on its first use (src/group.cc): a one-off cost "
             "marks the first timed loop after an algorithm's connection, and is set beside the model's first use of "
             "an algorithm neither warm-up size ran; a fall in time is set beside the model's nearest switch. Within "
             "2x: the two sizes differ by at most a factor of 2. A signal is not an NCCL switch (and not counted) where "
             "this nccl-tests warmed up every size, or its NCCL is older than 2.22 (every algorithm connected at init), "
             "for a one-off cost; where an all-to-all or send/recv moves at most "
             f"{P2P_FIXED_CHOICE_BYTES // 1024} KiB per peer (NCCL's p2p path: one channel in LL); where the time falls in one column only (NCCL's choice is the same "
             "for both) or from a row with a one-off cost; or where NCCL's own formula for the table's release "
             "(src/graph/tuning.cc, src/enqueue.cc) keeps its choice even with bandwidths "
             f"{LATENCY_LEAD_FACTOR:g}x lower (its lead over the next-best exceeds {LATENCY_LEAD_FACTOR:g}x its bytes "
             "term; not for tables whose NCCL ran a tuner plugin); or where NCCL_DEBUG_SUBSYS=TUNING, published for "
             "the same hardware without NCCL_ALGO/NCCL_PROTO, shows one choice at the size and its half.", "",
             "| table | seen at | evidence | mechanism's nearest prediction | within 2x |", "|---|---|---|---|---|"]
    hits = total = excluded = 0
    for ref in refs:
        seen = seen_switches(ref)
        if not seen:
            continue
        _, choices = predicted(ref, measured(ref))
        predictor = make_predictor(ref.cluster_arg(), ref.servers, ref.gpus, ref.env, ref.version(),
                                   ref.threads_gpus())
        for size, evidence in seen:
            where, verdict = switch_verdict(ref, size, evidence, choices, predictor)
            if verdict.startswith("not a switch"):
                excluded += 1
            else:
                hits, total = hits + (verdict == "yes"), total + 1
            lines.append(f"| {ref.stem} | {size_label(size)} | {evidence} | {where} | {verdict} |")
    lines += ["", f"{hits} of {total} seen switches lie within a factor of 2 of a predicted one; {excluded} more "
                  "signals are not NCCL choice changes (the reason in the table).", ""]
    return lines, hits, total


def report(scores: list[Score], loo_scores: list[Score], fit_section: list[str]) -> list[str]:
    lines = ["# Validation against published nccl-tests tables", "",
             "Generated by `python bench/reference_tables.py`; do not edit by hand. The collective model set beside "
             "every published table in `tests/nccltests/data/reference/` (each file "
             "names its public source, hardware and NCCL version), first leave-one-table-out, then as shipped. "
             "Each size is scored on the faster of its out-of-place and in-place timings (`Row.steady_time_us`: "
             "a one-off cost in the timed loop only adds time), except the H200 table, which gives in-place "
             "busbw only; the rows where that choice moves the time by more than 20 % are listed at the end.", ""]
    lines += ["## Leave-one-table-out", "",
              "Each table predicted with the physical parameters (`gpuwait.collectives.physical`) fitted on every "
              "other table, never on itself.", ""]
    lines += class_lines(loo_scores)[2:] + [""] + fit_section + [""]
    lines += ["## As shipped", "", "The model with the shipped parameters (`PUBLIC_TABLE_FIT`).", ""]
    lines += class_lines(scores)[2:] + [""] + table_lines(scores)
    lines += switch_lines([r for r in REFERENCES if not r.not_describable])[0]
    lines += one_off_lines()
    lines += ["## Not describable yet", "", "| table | class | why |", "|---|---|---|"]
    lines += [f"| {r.stem} | {r.hw_class} | {r.not_describable} |" for r in REFERENCES if r.not_describable]
    return lines


def leave_one_out(refs: list[Reference]) -> tuple[list[Score], dict[str, Adjustment]]:
    """Each table scored with the physical parameters fitted on every other table (from the unfitted
    defaults), and the per-table fits."""
    obs = {r.stem: observations(r) for r in refs if not r.not_fitted}
    scores, fits = [], {}
    for ref in refs:
        rest = [o for stem, group in obs.items() if stem != ref.stem for o in group]
        fits[ref.stem] = fit(rest, PUBLIC_FIT_NAMES)
        scores.append(score(ref, fits[ref.stem]))
    return scores, fits


def fit_lines(all_fit: Adjustment, fits: dict[str, Adjustment]) -> list[str]:
    names = list(all_fit.values)
    lines = ["## The fitted parameters", "",
             "Moves from the physical defaults (`gpuwait.collectives.physical.adjust`: latencies added, the "
             "per-message overhead a factor on the transport's, efficiencies the share reached): the values "
             "shipped as `PUBLIC_TABLE_FIT`, a fit on all tables with today's model (shipped values are refreshed "
             "from it when the model changes), and the spread of the leave-one-table-out fits.", "",
             "| parameter | shipped | all tables now | leave-one-out min | leave-one-out max |", "|---|---|---|---|---|"]
    for n in names:
        values = [f.values[n] for f in fits.values()]
        lines.append(f"| {n} | {fmt(PUBLIC_TABLE_FIT.get(n, 0.0), n)} | {fmt(all_fit.values[n], n)} | {fmt(min(values), n)} | "
                     f"{fmt(max(values), n)} |")
    return lines


def fmt(value: float, name: str) -> str:
    return f"{value * 1e6:.2f} us" if name.endswith(("latency_s", "cycle_s")) else f"{value:.3f}"


def size_lines(pattern: str) -> list[str]:
    """Per size of every table whose name contains ``pattern``: measured and predicted time (as shipped),
    the busbw error, NCCL's choice and the parts of the predicted time (``--sizes PATTERN``)."""
    lines = []
    for ref in (r for r in REFERENCES if not r.not_describable and pattern in r.stem):
        meas = measured(ref)
        pred, _ = predicted(ref, meas)
        sweep = sweep_of(ref, meas)
        params = adjust(sweep.unfitted_params, PUBLIC_TABLE_FIT)
        by_size = {r.size_bytes: i for i, r in enumerate(sweep.rows)}
        lines += [f"## {ref.stem}", "", "| size | measured us | predicted us | busbw error | choice | channels | chunk | "
                  "latency us | wire us | messages us | step cycle us | fill us |", "|---" * 12 + "|"]
        factor = busbw_factor(meas.collective, meas.n_ranks)
        for k, size in enumerate(meas.sizes):
            est = sweep.estimates[by_size[int(size)]]
            c = est.costs
            t_meas = meas.time_us[k] if np.isfinite(meas.time_us[k]) else size * factor / (meas.busbw[k] * 1e3)
            lines.append(
                f"| {size_label(int(size))} | {t_meas:.1f} | {pred.time_us[k]:.1f} | "
                f"{signed_pct(pred.busbw[k] / meas.busbw[k] - 1 if meas.busbw[k] > 0 else np.nan)} | "
                f"{est.algorithm}/{est.protocol} | "
                f"{est.n_channels} | {est.chunk_bytes} | {c.latency_with(params) * 1e6:.1f} | "
                f"{c.wire_with(params) * 1e6:.1f} | {c.nic_messages * params.net_message_overhead_s * 1e6:.1f} | "
                f"{c.connection_steps * c.proxy_load * params.net_step_cycle_s * 1e6:.1f} | {c.fill_with(params) * 1e6:.1f} |")
        lines.append("")
    return lines


def fit_literal(moves: dict[str, float]) -> dict[str, float]:
    """The fit as it would be shipped: latencies to 0.01 us, the per-message factor to 3 decimals."""
    return {n: round(v * 1e6, 2) * 1e-6 if n.endswith("_s") and n != "net_message_overhead_s" else round(v, 3)
            for n, v in moves.items()}


def print_fit_lines() -> list[str]:
    """``--print-fit``: the fit on every fitted table as the Python literal of ``PUBLIC_TABLE_FIT``
    (src/gpuwait/collectives/physical.py) and what shipping it would change: each class's busbw error as
    shipped, today's values -> the refreshed ones. Writes nothing; whoever refreshes pastes the literal."""
    refs = [r for r in REFERENCES if not r.not_describable]
    fitted = [r for r in refs if not r.not_fitted]
    refreshed = fit_literal(fit([o for r in fitted for o in observations(r)], PUBLIC_FIT_NAMES).values)
    items = [f'"{n}": {v * 1e6:.2f}e-6' if n.endswith("_s") and n != "net_message_overhead_s" else f'"{n}": {v:.3f}'
             for n, v in refreshed.items()]
    lines = [f"# fitted on {len(fitted)} tables (bench/reference_tables.py); paste over PUBLIC_TABLE_FIT in "
             "src/gpuwait/collectives/physical.py", "PUBLIC_TABLE_FIT: dict[str, float] = {",
             f"    {', '.join(items[:3])},", f"    {', '.join(items[3:])}}}", "",
             "| parameter | shipped | refreshed |", "|---|---|---|"]
    lines += [f"| {n} | {fmt(PUBLIC_TABLE_FIT.get(n, 0.0), n)} | {fmt(v, n)} |" for n, v in refreshed.items()]
    now = class_errors([score(r, Adjustment(dict(PUBLIC_TABLE_FIT))) for r in refs])
    after = class_errors([score(r, Adjustment(refreshed)) for r in refs])
    lines += ["", "As shipped, busbw error over every size >= 1 MiB per class: shipped -> refreshed", "",
              "| class | median | p95 |", "|---|---|---|"]
    lines += [f"| {c} | {100 * now[c][0]:.1f} -> {100 * after[c][0]:.1f} % | {100 * now[c][1]:.1f} -> "
              f"{100 * after[c][1]:.1f} % |" for c in CLASSES if c in now]
    return lines


def class_errors(scores: list[Score]) -> dict[str, tuple[float, float]]:
    """Per hardware class with scored tables: the median and p95 busbw error over all its sizes >= 1 MiB."""
    out = {}
    for name in CLASSES:
        n_sizes, med, p95 = pooled_errors([s for s in scores if s.ref.hw_class == name])
        if n_sizes:
            out[name] = (med, p95)
    return out


def main() -> None:
    global DEFAULT_VERSION_ONLY
    parser = argparse.ArgumentParser(description="Score the collective model on the published nccl-tests tables "
                                                 "(rewrites docs/validation-reference.md unless --sizes is given).")
    parser.add_argument("--default-nccl", action="store_true", help="every table as NCCL 2.30.7, not its own release")
    parser.add_argument("--sizes", nargs="?", const="", metavar="PATTERN",
                        help="per size of the tables whose name contains PATTERN (all without one); writes nothing")
    parser.add_argument("--print-fit", action="store_true",
                        help="print the fit on every table as PUBLIC_TABLE_FIT's literal and what shipping it changes; "
                             "writes nothing")
    args = parser.parse_args()
    DEFAULT_VERSION_ONLY = args.default_nccl
    if args.print_fit:
        sys.stdout.write("\n".join(print_fit_lines()) + "\n")
        return
    if args.sizes is not None:
        sys.stdout.write("\n".join(size_lines(args.sizes)) + "\n")
        return
    refs = [r for r in REFERENCES if not r.not_describable]
    scores = [score(r) for r in refs]
    loo_scores, fits = leave_one_out(refs)
    all_fit = fit([o for r in refs if not r.not_fitted for o in observations(r)], PUBLIC_FIT_NAMES)
    text = "\n".join(report(scores, loo_scores, fit_lines(all_fit, fits))) + "\n"
    (ROOT / "docs" / "validation-reference.md").write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
