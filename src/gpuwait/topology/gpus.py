"""GPU architectures: compute capability and NVLink generation of each GPU a cluster file may name.

One registry, one matching function. ``server.gpu_model`` is free text ("H100-SXM5-80GB",
"NVIDIA H100 80GB HBM3", "GB200"); :func:`gpu_arch` finds its entry or raises one
:class:`~gpuwait.errors.SpecError` naming the field, the value and the known names. There is no
default: an unknown name used to be read as Hopper (SM90), which silently chose NCCL's Hopper
tables for a GB300 or an RTX 2080 Ti.

What an entry holds, and where it comes from:

* ``sm``: CUDA compute capability x 10 (NVIDIA CUDA C++ Programming Guide, "Compute Capabilities";
  developer.nvidia.com/cuda-gpus). NCCL reads the same number (``cudaCompCap``) and groups it as
  SM60/70/80/86/90/100 in ``src/graph/topo.h`` v2.30.7 (``ncclTopoNVLinkBw``): any SM >= 100 takes the
  SM100 constant, so GB300 (SM103) and RTX 5090 (SM120) share Blackwell's figures there.
* ``nvlink_generation``, ``nvlink_links``, ``nvlink_link_Bps``: NVLink generation, links per GPU on the
  full (SXM / superchip) part and bytes/s per link per direction, from NVIDIA datasheets and
  architecture whitepapers. Every NVLink generation from 2 to 4 runs 25 GB/s per link per direction
  (50 GB/s bidirectional); NVLink5 doubles it to 50 GB/s. A server's link count is its per-GPU NVLink
  bandwidth divided by its generation's per-link rate (:meth:`GpuArch.links_for`), so a 900 GB/s
  NVLink5 GPU is 18 links, not 36.

Not confirmed on an NVIDIA datasheet (press and vendor figures only, marked in ``source``): the A800's
and H800's 400 GB/s NVLink (8 links at 25 GB/s per direction) and the H20's 900 GB/s (18 links).

Examples
--------
>>> gpu_arch("H100-SXM5-80GB").sm, gpu_arch("NVIDIA H100 80GB HBM3").name
(90, 'H100')
>>> gpu_arch("GH200").name, gpu_arch("GB200").name, gpu_arch("H20").name
('GH200', 'GB200', 'H20')
>>> gpu_arch("B200").links_for(900e9)
18
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuwait.errors import SpecError

NVLINK_LINK_Bps = {2: 25e9, 3: 25e9, 4: 25e9, 5: 50e9}  # per link per direction, by NVLink generation


@dataclass(frozen=True)
class GpuArch:
    """One GPU: compute capability, NVLink generation and links, and the names that mean it."""

    name: str
    sm: int                 # CUDA compute capability x 10
    nvlink_generation: int  # 0 = no NVLink
    nvlink_links: int       # links per GPU on the full part (0 = none)
    patterns: tuple[str, ...]  # regular expressions matched as a whole word of the upper-cased name
    source: str

    @property
    def nvlink_link_Bps(self) -> float:
        """Bytes/s per NVLink link per direction (0 without NVLink)."""
        return NVLINK_LINK_Bps.get(self.nvlink_generation, 0.0)

    @property
    def nvlink_Bps(self) -> float:
        """NVLink bytes/s per GPU per direction on the full part."""
        return self.nvlink_links * self.nvlink_link_Bps

    def links_for(self, nvlink_bandwidth_Bps: float) -> int:
        """NVLink links behind a per-GPU, per-direction bandwidth (0 for no NVLink).

        >>> gpu_arch("A100").links_for(300e9), gpu_arch("H100").links_for(450e9)
        (12, 18)
        """
        if nvlink_bandwidth_Bps <= 0:
            return 0
        # a GPU without NVLink given a bandwidth anyway (a bridge this registry does not know) keeps
        # the NVLink2-4 rate
        return round(nvlink_bandwidth_Bps / (self.nvlink_link_Bps or NVLINK_LINK_Bps[4]))


GPU_ARCHS: dict[str, GpuArch] = {}


def register_gpu_arch(arch: GpuArch) -> GpuArch:
    """Add a GPU architecture; its patterns must not match another entry's name."""
    GPU_ARCHS[arch.name] = arch
    return arch


def _word(pattern: str) -> re.Pattern[str]:
    # a pattern is a word: not preceded by a letter or digit ("GH200" is not "H200"), not followed
    # by a digit ("H200" is not "H20"); a letter may follow ("H100SXM", "L40S" is also "L40",
    # which the longer match "L40S" wins)
    return re.compile(rf"(?<![A-Z0-9]){pattern}(?![0-9])")


_VOLTA = "NVIDIA Tesla V100 datasheet (NVLink 300 GB/s); Volta whitepaper: 6 NVLink2 links, 25 GB/s per direction each"
_AMPERE = "NVIDIA A100 datasheet (NVLink 600 GB/s); GA100 whitepaper: 12 NVLink3 links, 25 GB/s per direction each"
_HOPPER = "NVIDIA H100 datasheet (NVLink 900 GB/s); Hopper whitepaper: 18 NVLink4 links, 50 GB/s bidirectional each"
_BLACKWELL = "NVIDIA DGX B200 / GB200 NVL72 datasheets (NVLink 1.8 TB/s); Blackwell whitepaper: 18 NVLink5 links, 100 GB/s bidirectional each"

for _arch in (
    GpuArch("V100", 70, 2, 6, ("V100",), _VOLTA),
    GpuArch("A100", 80, 3, 12, ("A100",), _AMPERE),
    GpuArch("A800", 80, 3, 8, ("A800",), "NVLink 400 GB/s (NVIDIA A800 announcement as reported by Reuters, Nov 2022; "
            "no NVIDIA SXM datasheet confirmed)"),
    GpuArch("A40", 86, 3, 4, ("A40",), "NVIDIA A40 product brief (NVLink bridge 112.5 GB/s); GA102 whitepaper: "
            "4 x4 NVLink3 links, 14.0625 GB/s per direction each"),
    GpuArch("L40S", 89, 0, 0, ("L40S",), "NVIDIA L40S datasheet (no NVLink)"),
    GpuArch("L40", 89, 0, 0, ("L40",), "NVIDIA L40 datasheet (no NVLink)"),
    GpuArch("H100", 90, 4, 18, ("H100",), _HOPPER),
    GpuArch("H200", 90, 4, 18, ("H200",), "NVIDIA H200 datasheet (NVLink 900 GB/s); " + _HOPPER),
    GpuArch("H800", 90, 4, 8, ("H800",), "NVLink 400 GB/s (press and vendor figures; no NVIDIA datasheet confirmed)"),
    GpuArch("H20", 90, 4, 18, ("H20",), "NVLink 900 GB/s (press and vendor figures; no NVIDIA datasheet confirmed)"),
    GpuArch("GH200", 90, 4, 18, ("GH200",), "NVIDIA GH200 Grace Hopper Superchip datasheet (NVLink 900 GB/s GPU-GPU)"),
    GpuArch("B100", 100, 5, 18, ("B100",), "NVIDIA HGX B100 datasheet (NVLink 1.8 TB/s); " + _BLACKWELL),
    GpuArch("B200", 100, 5, 18, ("B200",), _BLACKWELL),
    GpuArch("GB200", 100, 5, 18, ("GB200",), _BLACKWELL),
    GpuArch("B300", 103, 5, 18, ("B300",), "NVIDIA HGX B300 datasheet (NVLink 1.8 TB/s); CUDA compute capability 10.3"),
    GpuArch("GB300", 103, 5, 18, ("GB300",), "NVIDIA GB300 NVL72 datasheet (NVLink 1.8 TB/s); CUDA compute capability 10.3"),
    GpuArch("RTX 2080 Ti", 75, 0, 0, (r"RTX ?2080 ?TI",), "NVIDIA Turing whitepaper (TU102, SM75); the optional NVLink "
            "bridge is not modelled"),
    GpuArch("RTX 5090", 120, 0, 0, (r"RTX ?5090",), "NVIDIA GeForce RTX 5090 specifications (no NVLink); CUDA compute "
            "capability 12.0"),
):
    register_gpu_arch(_arch)


def gpu_arch(gpu_model: str) -> GpuArch:
    """The registry entry a ``server.gpu_model`` string names.

    Upper-cases the name and reads ``-``, ``_`` and ``/`` as spaces, then takes the entry whose
    pattern matches the longest stretch (so "L40S" is L40S, not L40); a tie goes to the entry
    registered first.

    Raises
    ------
    SpecError
        No entry matches: names ``server.gpu_model``, the value and the known names.

    Examples
    --------
    >>> gpu_arch("Tesla V100-SXM2-16GB").sm, gpu_arch("RTX-2080Ti").sm, gpu_arch("L40S").name
    (70, 75, 'L40S')
    >>> gpu_arch("RTX-9999")
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: server.gpu_model: unknown GPU 'RTX-9999'; expected a name containing one of ...
    """
    text = re.sub(r"[-_/\s]+", " ", gpu_model.upper())
    best: tuple[int, GpuArch] | None = None
    for arch in GPU_ARCHS.values():
        for pattern in arch.patterns:
            found = _word(pattern).search(text)
            if found and (best is None or len(found.group(0)) > best[0]):
                best = (len(found.group(0)), arch)
    if best is None:
        raise SpecError(f"server.gpu_model: unknown GPU {gpu_model!r}; expected a name containing one of "
                        f"{', '.join(GPU_ARCHS)}",
                        hint="add the GPU with gpuwait.topology.gpus.register_gpu_arch")
    return best[1]
