"""Server templates: named ServerSpecs, and the resolution of ``template:`` plus overrides.

Sources of the figures (table in docs/sources.md):

* NVLink per GPU per direction: NVLink3 (A100) 600 GB/s bidirectional = 300 GB/s each way;
  NVLink4 (H100/H200) 900 GB/s = 450 GB/s each way (NVIDIA H100 datasheet; MLCommons Inference v4.1
  H200 system description: "18x 4th Gen NVLink, 900GB/s").
* PCIe x16 per direction after 128b/130b coding: Gen4 16 GT/s x16 = 31.5 GB/s, Gen5 = 63 GB/s.
* DGX A100: 8 compute ConnectX-6 HDR 200 Gb/s, 4 PCIe Gen4 switches each with 2 GPUs and 2 NICs,
  2 AMD EPYC sockets, 2 dual-port storage NICs. DGX H100/H200: 8 ConnectX-7 NDR 400 Gb/s, PCIe Gen5,
  2 Xeon sockets (NVIDIA DGX user guides; the H200 MLCommons description lists PCIe Gen5 x16).
* DGX B200: 8 B200 with fifth-generation NVLink, 1.8 TB/s per GPU = 900 GB/s each way (14.4 TB/s in
  all) through 2 NVSwitch chips, 8 single-port ConnectX-7 400 Gb/s, 2 dual-port BlueField-3 400 Gb/s
  for storage, 2 Xeon Platinum 8570, PCIe Gen5 (NVIDIA DGX B200 datasheet). The 4 PCIe switches
  pairing GPUs with NICs are assumed as on the DGX H100.
* RTX 2080 Ti workstation: 2 GeForce RTX 2080 Ti (TU102, no NVLink bridge) behind one PCIe Gen3 x16
  switch (``nvidia-smi topo -m`` PIX), Gen3 x16 = 8 GT/s x 16 x 128/130 / 8 = 15.75 GB/s per direction,
  without CUDA peer-to-peer (``nvidia-smi topo -p2p p`` NS), as in github Anthony-Hoo/Anthony-Hoo.github.io
  en/posts/AutoDL_Multi-GPU_Interconnection_Test.md. CPU vendor and sockets not stated (Intel, 2 assumed:
  the post names NUMA node 1); no scale-out NIC.
* OCI BM.GPU4.8: 8 A100-SXM4 with 16 x 100 Gb/s RoCE ports ("16 VFs per node",
  github oracle-quickstart/oci-hpc-oke README.md); the NCCL topology file OCI ships for the shape
  (``manifests/topology/BM.GPU4.8.xml`` at commit 1402938) lists 8 dual-port ConnectX-5 Ex (PCI device
  0x1019) on PCIe Gen4 x16 with ``speed="100000"`` per port, each under a PCIe switch with a GPU, and
  2 AMD EPYC Rome sockets (family 143, model 49).
* AWS p4d.24xlarge / p4de.24xlarge: 8 A100-SXM4 40 GB / 80 GB on NVSwitch (NVLink3), 2 Intel Xeon
  8275CL (Cascade Lake), 400 Gb/s of EFA as 4 x 100 Gb/s EFA interfaces (AWS EC2 instance-type page;
  "Amazon EC2 P4d instances deep dive", AWS Compute blog, 2020). PCIe: 4 switches, each with 2 GPUs
  and 1 EFA (aws-ofi-nccl ``topology/p4de-24xl-topo.xml``).
* AWS p5.48xlarge: 8 H100-SXM5 80 GB on NVSwitch (NVLink4), 2 AMD EPYC (3rd generation), 3200 Gb/s
  of EFA on 32 network cards = 32 x 100 Gb/s (AWS EC2 user guide, "Maximize network bandwidth ...
  with EFA": "up to 32 network cards ... up to 3,200 Gbps"). PCIe Gen5: 8 switches, each with 1 GPU
  and 4 EFAs (aws-ofi-nccl ``topology/p5.48xl-topo.xml``: "4 groups of PCIe hierarchy under each
  socket. Each group has 1 GPUs and 4 NIC"). aws-ofi-nccl's RDMA protocol groups the EFAs by GPU
  locality into one NCCL device of 4 rails and reports the rails' summed speed
  (``src/nccl_ofi_rdma.c``: "Scale speed by the total number of rails") and stripes each message over
  the rails, so the template has 8 NICs of 400 Gb/s, one per GPU, as NCCL sees them (modelling choice:
  4 ports of 100 Gb/s per NIC would hold a connection to one port, as a single QP does).
* GB200 NVL72 compute tray (``gb200-nvl72``): 2 GB200 superchips = 2 Grace CPUs (Arm) and 4 Blackwell
  GPUs with fifth-generation NVLink, 18 links x 50 GB/s = 900 GB/s per GPU per direction (NVIDIA GB200
  NVL72 product page: 72 GPUs, 36 Grace CPUs, 18 compute trays, 9 NVLink Switch trays, "1.8 TB/s"
  GPU-to-GPU, 130 TB/s per rack = 72 x 1.8 TB/s); 4 ConnectX-7 400 Gb/s per tray, one per GPU
  (MLCommons Inference v6.1, Crusoe GB200-NVL72 system description: "for each 4-GPU node: 4x ...
  ConnectX-7"). The tray's NVLink goes to the rack's NVSwitch trays, so a cluster joins 18 trays with
  ``nvlink_domain: 18``. Assumed: NICs on PCIe Gen5 x16, one PCIe switch per Grace with 2 GPUs and 2 NICs,
  2 BlueField-3 400 Gb/s for storage as on the DGX B200.
* GB300 NVL72 compute tray (``gb300-nvl72``): the same tray with Blackwell Ultra GPUs (NVLink5, 900 GB/s
  per direction) and ConnectX-8 SuperNICs at 800 Gb/s (NVIDIA GB300 NVL72 product page; DGX GB300
  release notes list the CX8 firmware). Same assumptions as GB200 for PCIe and storage.
* A100 PCIe NVLink-bridged pairs (``a100-pcie-nvlink-pairs``): 8 A100 PCIe 80 GB, joined two by two by
  3 NVLink bridges = 12 NVLink3 links, 600 GB/s bidirectional = 300 GB/s per direction per pair
  (NVIDIA A100 datasheet, "NVLink Bridge for 2 GPUs: 600GB/s"; ``nvidia-smi topo -m`` shows NV12 inside
  a pair); PCIe Gen4 between pairs. Assumed: 4 PCIe switches (one pair each), 2 sockets, 4 x 200 Gb/s NICs.
* Quad GH200 node (``gh200-quad``: HPE Cray EX254n at CSCS Alps, and the same NVIDIA 4-superchip board in
  JUPITER's BullSequana XH3000): 4 GH200 superchips, each a Grace CPU and a Hopper GPU joined by
  NVLink-C2C, 900 GB/s = 450 GB/s per direction (NVIDIA GH200 Grace Hopper Superchip datasheet). The
  4 GPUs are wired all-to-all with no NVSwitch ("slingshot is not infiniband - there is no NVSwitch",
  CSCS docs ``docs/alps/hardware.md``): each GPU's 18 NVLink4 links split 6 per peer, "300 GB/s between
  pairs of GPUs (150 GB/s per direction)"; the 4 Grace CPUs "pairs connected with 100 GB/s per direction"
  (Juelich Supercomputing Centre, JUPITER configuration page, apps.fz-juelich.de/jsc/hps/jupiter/
  configuration.html). One network interface per superchip ("four Grace-Hopper modules and four
  corresponding network interface cards", CSCS ``docs/alps/hardware.md``): on Alps an HPE Slingshot-11
  Cassini NIC, 200 Gb/s, PCIe Gen4 x16 (HPE Slingshot 200GbE NIC datasheet), attached to its Grace.
  Modelled as 4 PCIe "switches" (one per Grace root complex) each holding one GPU (over C2C,
  ``gpu_host_bandwidth``) and one NIC; no storage NICs (Alps' storage shares the Slingshot fabric).
"""

from __future__ import annotations

from gpuwait.errors import UnknownNameError
from gpuwait.spec.cluster import ServerSpec

SERVER_TEMPLATES: dict[str, ServerSpec] = {}


def register_server_template(name: str, spec: ServerSpec) -> ServerSpec:
    """Add a server template; a new template touches no other file."""
    SERVER_TEMPLATES[name] = spec
    return spec


register_server_template("dgx-a100", ServerSpec(
    gpu_model="A100-SXM4-80GB", gpus=8, nvlink_bandwidth=300e9, pcie_bandwidth=31.5e9, pcie_switches=4, cpus=2,
    cpu_interconnect_bandwidth=64e9, cpu_vendor="amd", nics=8, nic_speed=25e9, storage_nics=2, storage_nic_speed=25e9,
))
_DGX_H100 = register_server_template("dgx-h100", ServerSpec(
    gpu_model="H100-SXM5-80GB", gpus=8, nvlink_bandwidth=450e9, pcie_bandwidth=63e9, pcie_switches=4, cpus=2,
    nics=8, nic_speed=50e9, storage_nics=2, storage_nic_speed=50e9,
))
# the same server with H200 GPUs (the same NVLink4, NICs, PCIe Gen5 and sockets: the sources above)
register_server_template("dgx-h200", _DGX_H100.model_copy(update={"gpu_model": "H200-SXM5-141GB"}))
register_server_template("hgx-h100-4nic", ServerSpec(
    gpu_model="H100-SXM5-80GB", gpus=8, nvlink_bandwidth=450e9, pcie_bandwidth=63e9, pcie_switches=4, cpus=2,
    nics=4, nic_speed=50e9, storage_nics=1, storage_nic_speed=25e9,
))
register_server_template("pcie-8gpu", ServerSpec(
    gpu_model="L40S", gpus=8, nvlink_bandwidth=0.0, pcie_bandwidth=31.5e9, pcie_switches=2, cpus=2,
    nics=2, nic_speed=25e9, storage_nics=1, storage_nic_speed=12.5e9,
))
register_server_template("generic", ServerSpec())
register_server_template("oci-bm-gpu4.8", ServerSpec(
    gpu_model="A100-SXM4-40GB", gpus=8, nvlink_bandwidth=300e9, pcie_bandwidth=31.5e9, pcie_switches=4, cpus=2,
    cpu_vendor="amd", nics=16, nic_speed=12.5e9, storage_nics=1, storage_nic_speed=6.25e9,
))
register_server_template("dual-plane-2x200g", ServerSpec(
    gpu_model="H100-SXM5-80GB", gpus=8, nvlink_bandwidth=450e9, pcie_bandwidth=63e9, pcie_switches=4, cpus=2,
    nics=8, nic_ports=2, nic_speed=25e9, storage_nics=2, storage_nic_speed=25e9,
))
register_server_template("dgx-b200", ServerSpec(
    gpu_model="B200-SXM-180GB", gpus=8, nvlink_bandwidth=900e9, pcie_bandwidth=63e9, pcie_switches=4, cpus=2,
    nics=8, nic_speed=50e9, storage_nics=2, storage_nic_speed=50e9,
))

# AWS instances: the ENA (front-end) network is not the compute fabric and is left out (storage_nics=0)
register_server_template("p4d-24xlarge", ServerSpec(
    gpu_model="A100-SXM4-40GB", gpus=8, nvlink_bandwidth=300e9, pcie_bandwidth=31.5e9, pcie_switches=4, cpus=2,
    cpu_vendor="intel", nics=4, nic_speed=12.5e9, storage_nics=0,
))
register_server_template("p4de-24xlarge", ServerSpec(
    gpu_model="A100-SXM4-80GB", gpus=8, nvlink_bandwidth=300e9, pcie_bandwidth=31.5e9, pcie_switches=4, cpus=2,
    cpu_vendor="intel", nics=4, nic_speed=12.5e9, storage_nics=0,
))
register_server_template("p5-48xlarge", ServerSpec(
    gpu_model="H100-SXM5-80GB", gpus=8, nvlink_bandwidth=450e9, pcie_bandwidth=63e9, pcie_switches=8, cpus=2,
    cpu_vendor="amd", nics=8, nic_speed=50e9, storage_nics=0,
))
register_server_template("rtx2080ti-pcie-2gpu", ServerSpec(
    gpu_model="RTX-2080Ti", gpus=2, nvlink_bandwidth=0.0, pcie_bandwidth=15.75e9, pcie_switches=1, cpus=2,
    gpu_p2p=False, nics=0, storage_nics=0,
))

# trays of a multi-node NVLink domain: the NVLink bandwidth is to the rack's NVSwitch trays (cluster.nvlink_domain)
register_server_template("gb200-nvl72", ServerSpec(
    gpu_model="GB200", gpus=4, nvlink_bandwidth=900e9, pcie_bandwidth=63e9, pcie_switches=2, cpus=2, cpu_vendor="arm",
    nics=4, nic_speed=50e9, storage_nics=2, storage_nic_speed=50e9,
))
register_server_template("gb300-nvl72", ServerSpec(
    gpu_model="GB300", gpus=4, nvlink_bandwidth=900e9, pcie_bandwidth=63e9, pcie_switches=2, cpus=2, cpu_vendor="arm",
    nics=4, nic_speed=100e9, storage_nics=2, storage_nic_speed=50e9,
))
# superchip nodes without an NVSwitch: the 4 GPUs in an NVLink mesh (6 NVLink4 links per pair)
register_server_template("gh200-quad", ServerSpec(
    gpu_model="GH200", gpus=4, nvlink_bandwidth=450e9, nvlink_topology="mesh", pcie_bandwidth=31.5e9,
    gpu_host_bandwidth=450e9, pcie_switches=4, cpus=4, cpu_interconnect_bandwidth=100e9, cpu_vendor="arm",
    nics=4, nic_speed=25e9, storage_nics=0,
))
register_server_template("a100-pcie-nvlink-pairs", ServerSpec(
    gpu_model="A100-PCIE-80GB", gpus=8, nvlink_bandwidth=300e9, nvlink_topology="pairs", pcie_bandwidth=31.5e9,
    pcie_switches=4, cpus=2, cpu_vendor="amd", nics=4, nic_speed=25e9, storage_nics=0,
))


def resolve_server(spec: ServerSpec) -> ServerSpec:
    """Apply ``spec.template``: the template's values, overridden by the fields set in ``spec``.

    >>> resolve_server(ServerSpec(template="dgx-a100", nics=4)).nic_speed
    25000000000.0
    """
    if spec.template is None:
        return spec
    try:
        base = SERVER_TEMPLATES[spec.template]
    except KeyError:
        raise UnknownNameError(
            f"server.template: unknown template {spec.template!r}; expected one of {', '.join(sorted(SERVER_TEMPLATES))}",
            hint="`gpuwait topo --list` shows templates and presets",
        ) from None
    overrides = {name: getattr(spec, name) for name in spec.model_fields_set if name != "template"}
    return base.model_copy(update=overrides | {"template": spec.template})
