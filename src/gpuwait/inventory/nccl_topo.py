"""Read NCCL topology XML (``NCCL_TOPO_DUMP_FILE``, or an ``NCCL_TOPO_FILE``) into a server template.

The XML (NCCL ``src/graph/xml.cc``, v2.30.7-1) is a tree ``system > cpu > pci > ... > gpu | nic > net``:
a ``cpu`` per NUMA node, ``pci`` elements for PCIe switches (class ``0x0604xx``) and devices, a ``gpu``
element (``dev``, ``sm``) with ``nvlink`` children (``target`` bus id, ``count`` links, ``tclass``
``0x068000`` = an NVSwitch), and ``nic > net`` (``name`` = the device NCCL uses, e.g. ``mlx5_0``,
``speed`` in Mb/s). A hand-written ``NCCL_TOPO_FILE`` (aws-ofi-nccl ``topology/*.xml``) may list only
``pci`` elements: a GPU is then a device of class ``0x0302xx``/``0x0300xx`` from vendor ``0x10de``, a NIC
one of class ``0x0200xx``/``0x0207xx``.

What is inferred, per host: GPUs (count, model from the PCI device id or the SM), the PCIe switch each
GPU and NIC sits under (the nearest ``pci`` ancestor of bridge class; a device straight under a CPU is
on that CPU's root complex, counted as a switch of its own), the CPU sockets and vendor (and an Intel
CPU's generation as NCCL classes it from ``familyid``/``modelid``), the NICs by
name in ``dev`` order with their speed, NVLink per GPU (links x the generation's per-link rate, from
:mod:`gpuwait.topology.gpus`) and its shape: ``nvswitch`` when links go to an NVSwitch,
``pairs`` when each GPU links to exactly one other, ``mesh`` otherwise. PCIe bandwidth per
direction = GT/s x lanes x 128/130 / 8 (Gen3 onwards; 8b/10b before, PCI-SIG base specifications).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from gpuwait.errors import SpecError
from gpuwait.spec.reader import read_bytes_checked
from gpuwait.topology.gpus import gpu_arch

#: PCI device id -> gpuwait GPU model (PCI ID Repository, pci-ids.ucw.cz, vendor 10de)
GPU_DEVICE_IDS = {
    "0x1db1": "V100-SXM2-16GB", "0x1db5": "V100-SXM2-32GB", "0x20b0": "A100-SXM4-40GB", "0x20b2": "A100-SXM4-80GB",
    "0x20b5": "A100-PCIE-80GB", "0x20f1": "A100-PCIE-40GB", "0x2330": "H100-SXM5-80GB", "0x2331": "H100-PCIE",
    "0x2335": "H200-SXM5-141GB", "0x2901": "B200",
}
#: SM -> model when the device id is not in the table (the SXM part of that generation)
GPU_BY_SM = {70: "V100", 80: "A100", 90: "H100", 100: "B200"}
_CPU_VENDOR = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}
#: Intel family-6 CPUID models from which NCCL gives the socket link a newer figure, newest first
#: (src/graph/topo.cc ``ncclTopoAddCpu``, NVIDIA/nccl v2.27.3-1): ERP >= 0xCF, SRP >= 0x8F, SKL >= 0x55, else BDW
_INTEL_GENERATIONS = ((0xCF, "emerald-rapids"), (0x8F, "sapphire-rapids"), (0x55, "skylake"), (0, "broadwell"))


def _intel_generation(cpu: ET.Element) -> str | None:
    """``server.cpu_generation`` from a ``cpu`` element's ``familyid``/``modelid`` as NCCL classes them;
    None when the dump lacks them or the family is not 6."""
    try:
        family, model = int(cpu.get("familyid", ""), 0), int(cpu.get("modelid", ""), 0)
    except ValueError:
        return None
    if family != 6:
        return None
    return next(name for first, name in _INTEL_GENERATIONS if model >= first)


def _cls(element: ET.Element) -> str:
    return element.get("class", "").lower()


def _is_bridge(element: ET.Element) -> bool:
    return element.tag == "pci" and _cls(element).startswith("0x0604")


def _pcie_Bps(element: ET.Element) -> float | None:
    speed = re.match(r"\s*([\d.]+)\s*GT/s", element.get("link_speed", ""))
    width = element.get("link_width", "")
    if not speed or not width.isdigit() or int(width) == 0:
        return None
    gts = float(speed[1])
    coding = 128 / 130 if gts >= 8 else 0.8
    return gts * 1e9 * int(width) * coding / 8


def _walk(element: ET.Element, parents: list[ET.Element], out: dict) -> None:
    for child in element:
        if child.tag == "cpu":
            out["cpus"].append(child)
        elif child.tag == "pci":
            has_gpu = child.find("gpu") is not None
            has_nic = child.find("nic") is not None
            nvidia = child.get("vendor", "").lower() == "0x10de"
            if has_gpu or (nvidia and _cls(child)[:6] in ("0x0302", "0x0300")):
                out["gpus"].append((child, parents + [element]))
            elif has_nic or _cls(child)[:6] in ("0x0200", "0x0207"):
                out["nics"].append((child, parents + [element]))
        elif child.tag == "nic" and element.tag != "pci":
            out["nics"].append((child, parents + [element]))  # a NIC NCCL could not place on PCI
        _walk(child, parents + [element], out)


def _switch_of(parents: list[ET.Element], switches: dict[int, int]) -> int:
    for element in reversed(parents):
        if _is_bridge(element) or element.tag == "cpu":
            return switches.setdefault(id(element), len(switches))
    return switches.setdefault(0, len(switches))


def _gpu_model(path: str, pci: ET.Element) -> str:
    device = pci.get("device", "").lower()
    if device in GPU_DEVICE_IDS:
        return GPU_DEVICE_IDS[device]
    gpu = pci.find("gpu")
    sm = int(gpu.get("sm", "0")) if gpu is not None and gpu.get("sm", "").isdigit() else 0
    if sm // 10 * 10 in GPU_BY_SM or sm in GPU_BY_SM:
        return GPU_BY_SM.get(sm, GPU_BY_SM.get(sm // 10 * 10, ""))
    raise SpecError(f"{path}: GPU at {pci.get('busid')}: device {device or '?'} sm {sm or '?'} is not a GPU gpuwait knows; "
                    "expected one of the device ids " + ", ".join(sorted(GPU_DEVICE_IDS)),
                    hint="give the server with --server-template and leave --nccl-topo out")


def _nvlink(path: str, gpus: list, model: str) -> dict:
    busids = {pci.get("busid", "").lower(): i for i, (pci, _) in enumerate(gpus)}
    counts, peers, to_switch = [], [], False
    for pci, _ in gpus:
        total, mine = 0, set()
        for link in pci.iter("nvlink"):
            total += int(link.get("count", "1"))
            target = link.get("target", "").lower()
            if target in busids:
                mine.add(busids[target])
            else:  # an NVSwitch (tclass 0x068000) or one NCCL could not identify (a VM): a switch either way
                to_switch = True
        counts.append(total)
        peers.append(mine)
    if not any(counts):
        # a <gpu> element with no <nvlink>: NCCL saw none; no <gpu> at all (a hand-written NCCL_TOPO_FILE):
        # NCCL reads NVLink from NVML at run time, so the file says nothing about it
        return {"nvlink_bandwidth": 0.0} if any(pci.find("gpu") is not None for pci, _ in gpus) else {}
    links = max(counts)
    fields: dict = {"nvlink_bandwidth": links * (gpu_arch(model).nvlink_link_Bps or 25e9)}
    if to_switch:
        fields["nvlink_topology"] = "nvswitch"
    elif all(len(p) == 1 for p in peers):
        fields["nvlink_topology"] = "pairs"
    else:
        fields["nvlink_topology"] = "mesh"
    return fields


def read_nccl_topo(path: str) -> tuple[dict, list[str]]:
    """The server fields a host's NCCL topology XML implies, and its NIC names in ``dev`` order."""
    try:
        root = ET.fromstring(read_bytes_checked(path, "an NCCL topology XML file"))
    except ET.ParseError as err:
        line = err.position[0] if err.position else 0
        raise SpecError(f"{path}:{line}: not well-formed XML ({err.msg if hasattr(err, 'msg') else err}); "
                        "expected an NCCL topology dump (<system version=...>)") from None
    except OSError as err:
        raise SpecError(f"{path}: cannot read ({err.strerror}); expected an NCCL topology XML file") from None
    if root.tag != "system":
        raise SpecError(f"{path}: the root element is <{root.tag}>; expected <system> as NCCL_TOPO_DUMP_FILE writes it")
    found: dict = {"cpus": [], "gpus": [], "nics": []}
    _walk(root, [], found)
    if not found["gpus"]:
        raise SpecError(f"{path}: no GPU found; expected a <gpu> element or a PCI device of class 0x0302 from NVIDIA "
                        "(a dump from a host with GPUs)")
    switches: dict[int, int] = {}
    gpu_switch = [_switch_of(parents, switches) for _, parents in found["gpus"]]
    nics: list[tuple[int, str, float, int]] = []  # (dev, name, speed in Mb/s, PCIe switch)
    for element, parents in found["nics"]:
        net = element.find(".//net")
        # a <net> with no name (a hand-written file) is named by its place, like a NIC with no <net>
        name = (net.get("name") if net is not None else None) or f"nic{len(nics)}"
        dev = int(net.get("dev", len(nics))) if net is not None and net.get("dev", "").isdigit() else len(nics)
        speed_mbps = float(net.get("speed", "0")) if net is not None else 0.0
        nics.append((dev, name, speed_mbps, _switch_of(parents, switches)))
    nics.sort()
    models = {_gpu_model(path, pci) for pci, _ in found["gpus"]}
    if len(models) > 1:
        raise SpecError(f"{path}: GPUs of different models ({', '.join(sorted(models))}); expected one model per server")
    model = models.pop()
    cpus = found["cpus"] or [root]
    vendor = cpus[0].get("vendor", "")
    arch = cpus[0].get("arch", "")
    fields: dict = {
        "gpu_model": model, "gpus": len(found["gpus"]), "pcie_switches": len(switches),
        "gpu_pcie_switch": gpu_switch, "cpus": len(found["cpus"]) or 1,
        "cpu_vendor": "arm" if arch in ("arm64", "aarch64") else _CPU_VENDOR.get(vendor, "other"),
        "nics": len(nics), "nic_pcie_switch": [n[3] for n in nics],
    }
    if fields["cpu_vendor"] == "intel" and (generation := _intel_generation(cpus[0])):
        fields["cpu_generation"] = generation
    speeds = [n[2] for n in nics if n[2] > 0]
    if speeds:
        fields["nic_speed"] = f"{max(speeds) / 1000:g}Gbps"
    pcie = [b for b in (_pcie_Bps(pci) for pci, _ in found["gpus"]) if b]
    if pcie:
        fields["pcie_bandwidth"] = f"{max(pcie) / 1e9:.4g}GB/s"
    fields |= _nvlink(path, found["gpus"], model)
    if isinstance(fields.get("nvlink_bandwidth"), float):
        fields["nvlink_bandwidth"] = f"{fields['nvlink_bandwidth'] / 1e9:g}GB/s"
    return fields, [n[1] for n in nics]


def read_nccl_topo_dir(path: str) -> tuple[dict, list[str], dict[str, str]]:
    """Every ``*.xml`` of a directory (one per host, named after it) or one file: the common server fields,
    NIC names and the file each host came from. Hosts that disagree get one error naming both files."""
    source = Path(path)
    files = sorted(source.glob("*.xml")) if source.is_dir() else [source]
    if not files:
        raise SpecError(f"{path}: no *.xml file; expected one NCCL topology dump per host (HOST.xml)")
    first_fields, first_nics, first_file = None, None, None
    hosts = {}
    for file in files:
        fields, nics = read_nccl_topo(str(file))
        hosts[file.stem] = str(file)
        if first_fields is None:
            first_fields, first_nics, first_file = fields, nics, file
            continue
        differ = sorted(k for k in fields.keys() | first_fields.keys() if fields.get(k) != first_fields.get(k))
        if differ:
            key = differ[0]
            raise SpecError(f"{file}: {key} is {fields.get(key)}; expected {first_fields.get(key)} as in {first_file} "
                            "(gpuwait models one server template)")
    return first_fields or {}, first_nics or [], hosts
