"""NCCL environment variables that change communication behaviour, parsed and checked once.

Read from a mapping (``os.environ``) or from ``--env NAME=VALUE`` pairs into a frozen :class:`NcclEnv`.
Names, meanings and defaults follow the NCCL User Guide's "Environment Variables" page (``env.rst``,
NCCL <= 2.30), cross-checked against the ``NCCL_PARAM`` defaults in NVIDIA/nccl's source. A variable
that is not set keeps NCCL's default; ``None`` marks "NCCL decides" (platform-dependent defaults).

Parsing is stricter than NCCL, on purpose: NCCL logs an invalid value and silently falls back to the
default, which hides typos; gpuwait rejects it with one line naming the variable, the value and what
was expected. An empty value (``NCCL_ALGO=``) counts as unset, as in NCCL. A variable gpuwait reads but
cannot model beyond its default (:data:`NOT_MODELLED`, e.g. ``NCCL_COLLNET_ENABLE=1``) is refused with one
line saying what is modelled. A variable that does not change a collective's time (:data:`NO_TIMING_EFFECT`:
logging, dump files, bootstrap addressing, how NCCL allocates its buffers) is accepted the same way from
the process environment and from ``--env``, kept in ``extra`` and listed in ``no_timing`` with why. Other
``NCCL_*`` variables of the process environment are kept verbatim in ``extra`` and listed in ``ignored``
(``perf --report-algo`` prints both); given with ``--env`` they are refused (:func:`check_modelled`): a
variable named on purpose must change the result, and gpuwait cannot say that one of them would not.

Examples
--------
>>> env = parse_env({"NCCL_ALGO": "Ring", "NCCL_IB_QPS_PER_CONNECTION": "4", "NCCL_IB_HCA": "mlx5"})
>>> env.algo, env.ib_qps_per_connection, env.ignored
('Ring', 4, ('NCCL_IB_HCA',))
>>> sorted(env.allowed_algorithms("all_reduce"))
['ring']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, cast

from gpuwait.collectives.nccl_versions import DEFAULT_RELEASE, NcclRelease, nccl_release, newer_release_note
from gpuwait.collectives.tuning import Prediction, TuningInputs, choose, parse_algorithm_list, parse_protocol_list
from gpuwait.errors import SpecError
from gpuwait.spec.cluster import ClusterSpec, RoutingSpec
from gpuwait.topology.pcipath import parse_level
from gpuwait.transport.platforms import Platform, cluster_platform

#: NCCL_NET_GDR_LEVEL values (NCCL env.rst), with the legacy integers LOC=0 ... SYS=4.
GDR_LEVELS: tuple[str, ...] = ("LOC", "PIX", "PXB", "PHB", "SYS")
#: net_socket.cc limits: at most 16 helper threads and 64 sockets per connection.
MAX_SOCKET_THREADS = 16
MAX_SOCKETS = 64
#: MAXCHANNELS in recent NCCL (channels are CUDA blocks; NCCL env.rst documents up to 32 for
#: NCCL_MIN_NCHANNELS and 64 for the CTA variables since 2.25).
MAX_CHANNELS = 64


@dataclass(frozen=True)
class NcclEnv:
    """The NCCL variables gpuwait models, with NCCL's defaults (NCCL env.rst).

    Attributes
    ----------
    algo, proto : str or None
        ``NCCL_ALGO`` / ``NCCL_PROTO`` verbatim (validated); None = NCCL chooses among all.
    min_nchannels, max_nchannels : int or None
        ``NCCL_MIN_NCHANNELS`` / ``NCCL_MAX_NCHANNELS``; None = platform default (source -2).
    ib_qps_per_connection : int
        ``NCCL_IB_QPS_PER_CONNECTION``, 1-128, default 1.
    ib_split_data_on_qps : bool
        ``NCCL_IB_SPLIT_DATA_ON_QPS``: split each message over all QPs; default 0 since 2.20. Only 0 is
        accepted (:data:`NOT_MODELLED`).
    net_gdr_level : str or None
        ``NCCL_NET_GDR_LEVEL`` (alias ``NCCL_IB_GDR_LEVEL``) as LOC/PIX/PXB/PHB/SYS; None = auto.
    net_gdr_read : bool or None
        ``NCCL_NET_GDR_READ``; named in NCCL env.rst without a default: None = NCCL decides (source -2).
    ib_disable : bool
        ``NCCL_IB_DISABLE``: fall back to sockets; default 0.
    ibext_disable : bool
        ``NCCL_IBEXT_DISABLE``: nccl-rdma-sharp-plugins' own switch for its IB/RoCE transport (``ib_plugin.c``);
        with a cluster whose image installs that plugin, sockets need both; default 0.
    net : str or None
        ``NCCL_NET``: the network NCCL must use, by name (``src/plugin/net.cc``: compared case-insensitively with
        each network's name); ``"ib"`` or ``"socket"``, NCCL's own transports, or a net plugin's name (which
        keeps a plugin cluster's transport); None = unset (the first usable). ``Socket`` is the one way to put a
        plugin's cluster (EFA, Slingshot, TCPX/TCPXO) on NCCL's sockets.
    nvls_enable : int
        ``NCCL_NVLS_ENABLE`` 0 / 1 / 2, default 2 (= enabled when supported, as 1 since 2.29).
    mnnvl_enable : int
        ``NCCL_MNNVL_ENABLE`` 0 / 1 / 2, default 2 (= on when the GPUs report an NVLink fabric clique,
        NCCL >= 2.20, src/init.cc ``NCCL_PARAM(MNNVLEnable, "MNNVL_ENABLE", 2)``). 0 makes every server
        its own node again, talking to the others over the network.
    collnet_enable : bool
        ``NCCL_COLLNET_ENABLE``; default 0. 1 is refused (:data:`NOT_MODELLED`): CollNet needs SHARP switches
        that reduce in the network, and gpuwait's switches only forward.
    p2p_disable, shm_disable, pxn_disable : bool
        ``NCCL_P2P_DISABLE``, ``NCCL_SHM_DISABLE``, ``NCCL_PXN_DISABLE``; named in NCCL env.rst; set to 1 to
        disable, default 0 (NCCL docs; ``PXN_DISABLE`` and ``SHM_DISABLE`` default 0 in the source).
        ``p2p_disable`` is modelled as a server without peer access (``server.gpu_p2p`` false): NCCL's SHM
        transport through host memory (:func:`gpuwait.collectives.tuning.host_path_ring_graph` and the
        flows' route through the CPU in :mod:`gpuwait.fabric.perf`); the other two accept only their
        default, 0 (:data:`NOT_MODELLED`).
    socket_nthreads, nsocks_perthread : int or None
        ``NCCL_SOCKET_NTHREADS`` (1-16) and ``NCCL_NSOCKS_PERTHREAD``, product at most 64; named in NCCL env.rst;
        None = NCCL's per-platform default (source -2).
    net_overhead_ns : int or None
        ``NCCL_NET_OVERHEAD`` in ns, the per-step network post cost of the tuning model
        (tuning.cc getNetOverhead); None = NCCL's per-CPU default.
    min_ctas, max_ctas : int or None
        ``NCCL_MIN_CTAS`` / ``NCCL_MAX_CTAS`` (NCCL >= 2.17, 1-64): further channel limits, combined with the
        NCHANNELS pair as NCCL does (src/graph/connect.cc, v2.30.7-1: channels = min(NCCL_MAX_NCHANNELS,
        found, maxCTAs), at least max(NCCL_MIN_NCHANNELS, minCTAs)); :meth:`channel_limits`.
    nvls_nchannels : int or None
        ``NCCL_NVLS_NCHANNELS``: the NVLS / NVLSTree compute channels, clamped to [NCCL_MIN_CTAS, NCCL_MAX_CTAS]
        (src/transport/nvls.cc; src/init.cc ``config.nvlsCTAs`` from 2.27, NVIDIA/nccl v2.18.3-1 to v2.30.7-1);
        None = the release's default for the GPU (16 on Hopper; :meth:`NcclRelease.nvls_channels`).
    p2p_level : str or None
        ``NCCL_P2P_LEVEL`` as a PCI path type (LOC ... SYS, or NVL; :func:`gpuwait.topology.pcipath.parse_level`);
        None = NCCL's per-platform default (:func:`gpuwait.topology.pcipath.uses_p2p`).
    extra : mapping
        Every other ``NCCL_*`` variable, verbatim, from the process environment; gpuwait does not model them
        (``--env`` refuses them: :func:`parse_env_pairs`).
    release : NcclRelease
        The NCCL release whose tuning model applies (not an environment variable: ``perf --nccl-version``,
        a cluster's ``nccl.version`` or a log's printed version; :meth:`with_version`). Default 2.30.7.
    release_from : str
        Where ``release`` came from ("NCCL default", "cluster file", "--nccl-version", a log).
    explicit : tuple of str
        The modelled variables that were set, in name order (the platform's included).
    platform : Platform or None
        The platform whose plugin or image set variables the job left unset (:func:`parse_env`'s ``platform``).
    set_by : mapping
        Variable -> the platform's label, for each variable the platform (not the job) set.
    calibration_note : str or None
        What a prediction under this environment says of a cluster calibration fitted under another
        (:func:`cluster_env`, :func:`calibration_env_note`); None when they agree or nothing was recorded.
    """

    algo: str | None = None
    proto: str | None = None
    min_nchannels: int | None = None
    max_nchannels: int | None = None
    ib_qps_per_connection: int = 1
    ib_split_data_on_qps: bool = False
    net_gdr_level: str | None = None
    net_gdr_read: bool | None = None
    ib_disable: bool = False
    ibext_disable: bool = False
    net: str | None = None
    nvls_enable: int = 2
    mnnvl_enable: int = 2
    collnet_enable: bool = False
    p2p_disable: bool = False
    shm_disable: bool = False
    pxn_disable: bool = False
    socket_nthreads: int | None = None
    nsocks_perthread: int | None = None
    net_overhead_ns: int | None = None
    min_ctas: int | None = None
    max_ctas: int | None = None
    nvls_nchannels: int | None = None
    p2p_level: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    explicit: tuple[str, ...] = ()
    release: NcclRelease = DEFAULT_RELEASE
    release_from: str = "NCCL default"
    asked_version: str | None = None  # the version ``release`` was chosen for (None: the default)
    platform: Platform | None = None
    set_by: Mapping[str, str] = field(default_factory=dict)
    calibration_note: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))
        object.__setattr__(self, "set_by", MappingProxyType(dict(self.set_by)))

    def with_version(self, version: str | None, what: str = "NCCL version") -> NcclEnv:
        """This environment under the NCCL release ``version`` (None keeps the current one).

        >>> NcclEnv().with_version("2.21.5+cuda12.4").release.version
        '2.21.5'
        """
        if version is None:
            return self
        return replace(self, release=nccl_release(version, what), release_from=SETTING_SOURCES.get(what, what),
                       asked_version=str(version).strip())

    @property
    def version_note(self) -> str | None:
        """What a prediction under this environment says about its NCCL release: the note of
        :func:`~gpuwait.collectives.nccl_versions.newer_release_note` for a version asked for (``--nccl-version``,
        ``nccl.version``) newer than the last one checked; None for the default or a checked release.

        >>> NcclEnv().with_version("2.31.0").version_note.startswith("NCCL 2.31.0 is newer than")
        True
        >>> NcclEnv().version_note, NcclEnv().with_version("2.21.5").version_note
        (None, None)
        """
        return None if self.asked_version is None else newer_release_note(self.asked_version)

    @property
    def notes(self) -> tuple[str, ...]:
        """What a prediction under this environment must say beside its result: :attr:`version_note` and
        :attr:`calibration_note`, those that apply."""
        return tuple(note for note in (self.version_note, self.calibration_note) if note is not None)

    def channel_limits(self, nvls: bool = False) -> tuple[int, int]:
        """(lowest, highest) channel count NCCL may run with: the NCHANNELS and CTAS limits combined as
        src/graph/connect.cc (v2.30.7-1) combines them, the minimum capped by the maximum as init.cc does.
        NVLS channels (``nvls``) obey only the CTA limits (transport/nvls.cc: "Clamp nvlsChannels to
        [minCTAs, maxCTAs]").

        >>> parse_env_pairs(["NCCL_MIN_CTAS=24", "NCCL_MIN_NCHANNELS=4"]).channel_limits()
        (24, 64)
        >>> parse_env_pairs(["NCCL_MAX_CTAS=8", "NCCL_MIN_CTAS=16"]).channel_limits()
        (8, 8)
        """
        nchannels = (None, None) if nvls else (self.min_nchannels, self.max_nchannels)
        high = min(v for v in (nchannels[1], self.max_ctas, MAX_CHANNELS) if v is not None)
        low = max(v for v in (nchannels[0], self.min_ctas, 1) if v is not None)
        return min(low, high), high

    @property
    def ignored(self) -> tuple[str, ...]:
        """The ``NCCL_*`` variables that were set but that gpuwait does not model, sorted
        (those of :data:`NO_TIMING_EFFECT` are in :attr:`no_timing` instead)."""
        return tuple(sorted(name for name in self.extra if name not in NO_TIMING_EFFECT))

    @property
    def no_timing(self) -> tuple[str, ...]:
        """The set ``NCCL_*`` variables that do not change a collective's time (:data:`NO_TIMING_EFFECT`), sorted."""
        return tuple(sorted(name for name in self.extra if name in NO_TIMING_EFFECT))

    def allowed_algorithms(self, collective: str) -> frozenset[str] | None:
        """The algorithms ``NCCL_ALGO`` leaves for ``collective``; None if it leaves NCCL's default."""
        return None if self.algo is None else parse_algorithm_list(self.algo)[collective]

    def allowed_protocols(self, collective: str) -> frozenset[str] | None:
        """The protocols ``NCCL_PROTO`` leaves for ``collective``; None if it leaves NCCL's default."""
        return None if self.proto is None else parse_protocol_list(self.proto)[collective]

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> NcclEnv:
        """Parse the ``NCCL_*`` entries of ``env`` (other names are skipped).

        Examples
        --------
        >>> NcclEnv.from_mapping({"NCCL_NVLS_ENABLE": "0", "HOME": "/root"}).nvls_enable
        0
        """
        return parse_env(env)


# --------------------------------------------------------------------------------------------------
# Per-variable parsers. Each takes the variable name and the stripped text and raises a one-line SpecError.


def _int(name: str, text: str, low: int, high: int | None = None) -> int:
    try:
        value = int(text, 0)  # NCCL reads integers with strtoll(base 0): 16, 0x10
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        expected = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
        raise SpecError(f"{name}: got {text!r}; expected {expected}")
    return value


def _flag(name: str, text: str) -> bool:
    if text not in ("0", "1"):
        raise SpecError(f"{name}: got {text!r}; expected 0 or 1")
    return text == "1"


def _net(name: str, text: str) -> str:
    # NCCL matches the name with strcasecmp (src/plugin/net.cc): its own "IB" and "Socket", or a plugin's name
    if not text.strip():
        raise SpecError(f"{name}: got {text!r}; expected IB, Socket or a net plugin's name")
    return text.strip().lower() if text.strip().lower() in ("ib", "socket") else text.strip()


def _algo(name: str, text: str) -> str:
    parse_algorithm_list(text)  # raises a SpecError naming NCCL_ALGO
    return text


def _proto(name: str, text: str) -> str:
    parse_protocol_list(text)
    return text


def _gdr_level(name: str, text: str) -> str:
    upper = text.upper()
    if upper in GDR_LEVELS:
        return upper
    if text.isdigit() and int(text) < len(GDR_LEVELS):
        return GDR_LEVELS[int(text)]
    raise SpecError(f"{name}: got {text!r}; expected one of {', '.join(GDR_LEVELS)} (or 0-4)")


def _nvls(name: str, text: str) -> int:
    if text not in ("0", "1", "2"):
        raise SpecError(f"{name}: got {text!r}; expected 0 (off), 1 (on) or 2 (auto)")
    return int(text)


#: env name -> (NcclEnv field, parser). Aliases map to the same field; the canonical name wins.
VARIABLES: Mapping[str, tuple[str, Callable[[str, str], object]]] = MappingProxyType({
    "NCCL_ALGO": ("algo", _algo),
    "NCCL_PROTO": ("proto", _proto),
    "NCCL_MIN_NCHANNELS": ("min_nchannels", lambda n, t: _int(n, t, 1, MAX_CHANNELS)),
    "NCCL_MAX_NCHANNELS": ("max_nchannels", lambda n, t: _int(n, t, 1, MAX_CHANNELS)),
    "NCCL_IB_QPS_PER_CONNECTION": ("ib_qps_per_connection", lambda n, t: _int(n, t, 1, 128)),
    "NCCL_IB_SPLIT_DATA_ON_QPS": ("ib_split_data_on_qps", _flag),
    "NCCL_NET_GDR_LEVEL": ("net_gdr_level", _gdr_level),
    "NCCL_IB_GDR_LEVEL": ("net_gdr_level", _gdr_level),  # the former name (NCCL env.rst)
    "NCCL_NET_GDR_READ": ("net_gdr_read", _flag),
    "NCCL_IB_DISABLE": ("ib_disable", _flag),
    "NCCL_IBEXT_DISABLE": ("ibext_disable", _flag),
    "NCCL_NET": ("net", _net),
    "NCCL_NVLS_ENABLE": ("nvls_enable", _nvls),
    "NCCL_MNNVL_ENABLE": ("mnnvl_enable", _nvls),
    "NCCL_COLLNET_ENABLE": ("collnet_enable", _flag),
    "NCCL_P2P_DISABLE": ("p2p_disable", _flag),
    "NCCL_SHM_DISABLE": ("shm_disable", _flag),
    "NCCL_PXN_DISABLE": ("pxn_disable", _flag),
    "NCCL_SOCKET_NTHREADS": ("socket_nthreads", lambda n, t: _int(n, t, 1, MAX_SOCKET_THREADS)),
    "NCCL_NSOCKS_PERTHREAD": ("nsocks_perthread", lambda n, t: _int(n, t, 1, MAX_SOCKETS)),
    "NCCL_NET_OVERHEAD": ("net_overhead_ns", lambda n, t: _int(n, t, 0)),
    "NCCL_MIN_CTAS": ("min_ctas", lambda n, t: _int(n, t, 1, MAX_CHANNELS)),
    "NCCL_MAX_CTAS": ("max_ctas", lambda n, t: _int(n, t, 1, MAX_CHANNELS)),
    "NCCL_NVLS_NCHANNELS": ("nvls_nchannels", lambda n, t: _int(n, t, 1, MAX_CHANNELS)),
    "NCCL_P2P_LEVEL": ("p2p_level", lambda n, t: parse_level(t, n)),
})

#: Variables gpuwait reads but whose non-default values it does not model: setting one is refused with
#: this line (what is not modelled, and what is), never silently ignored (issue 20).
NOT_MODELLED: Mapping[str, str] = MappingProxyType({
    "NCCL_COLLNET_ENABLE": "CollNet (SHARP in-network reduction) is not modelled: gpuwait's switches forward "
                           "but do not reduce; modelled algorithms: Ring, Tree, NVLS, NVLSTree, PAT",
    "NCCL_SHM_DISABLE": "disabling NCCL's SHM transport is not modelled; modelled: P2P between a node's GPUs, "
                        "or SHM through host memory (NCCL_P2P_DISABLE=1 or server.gpu_p2p: false)",
    "NCCL_PXN_DISABLE": "PXN (sending through a peer GPU's NIC over NVLink) cannot be turned off: a ring leaving "
                        "a server hands its chunk over NVLink to the GPU on the next server's rail, as NCCL does "
                        "with PXN on (its default); all-to-all and send/recv send through each GPU's own NIC",
    "NCCL_IB_SPLIT_DATA_ON_QPS": "only NCCL's default 0 is modelled: each connection's bytes are shared evenly "
                                 "over its QPs (NCCL_IB_QPS_PER_CONNECTION), the average of round-robin messages",
})
_ALIASES = {"NCCL_IB_GDR_LEVEL": "NCCL_NET_GDR_LEVEL"}

#: Variables that do not change a collective's time once the communicator exists: accepted from the
#: process environment and from ``--env`` alike, listed with this reason (``perf --report-algo``).
#: Meanings from the NCCL User Guide's "Environment Variables" page (env.rst, NCCL 2.30).
NO_TIMING_EFFECT: Mapping[str, str] = MappingProxyType({
    "NCCL_DEBUG": "log level only",
    "NCCL_DEBUG_SUBSYS": "log filter only",
    "NCCL_DEBUG_FILE": "log destination only",
    "NCCL_WARN_ENABLE_DEBUG_INFO": "log level of warnings only",
    "NCCL_SET_THREAD_NAME": "names NCCL's threads for debuggers",
    "NCCL_TOPO_DUMP_FILE": "writes the detected topology to a file",
    "NCCL_GRAPH_DUMP_FILE": "writes the search graphs to a file",
    "NCCL_COMM_ID": "bootstrap address (communicator set-up, before any collective)",
    "NCCL_SOCKET_IFNAME": "the interface of the bootstrap and the socket transport; gpuwait uses the "
                          "cluster file's NICs",
    "NCCL_SOCKET_FAMILY": "IPv4 or IPv6 for the bootstrap and the socket transport",
    "NCCL_IB_GID_INDEX": "the RoCE GID (address) a QP uses; the transport is the cluster file's",
    "NCCL_CUMEM_ENABLE": "how NCCL allocates its buffers (cuMem* virtual memory or cudaMalloc); "
                         "the bytes take the same links",
})


def with_platform(env: Mapping[str, str], platform: Platform | None) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` with the modelled variables ``platform`` sets where ``env`` does not name them, and which ones
    the platform set (variable -> its label). A name the job gives wins, even empty: aws-ofi-nccl sets a variable
    only when ``getenv`` finds none (``src/platform-aws.c``), and NCCL reads an empty value as unset.

    >>> from gpuwait.transport.platforms import PLATFORMS
    >>> with_platform({"NCCL_ALGO": "Ring"}, PLATFORMS["p4de.24xlarge"])
    ({'NCCL_ALGO': 'Ring', 'NCCL_PROTO': 'Simple'}, {'NCCL_PROTO': 'aws-ofi-nccl on p4de'})
    >>> with_platform({"NCCL_PROTO": "LL128"}, PLATFORMS["p4de.24xlarge"])[1]
    {}
    """
    merged, set_by = dict(env), {}
    if platform is not None:
        for name, value in platform.env.items():
            if name not in env:
                merged[name], set_by[name] = value, platform.label
    return merged, set_by


def cluster_env(cluster: ClusterSpec, env: Mapping[str, str] | None = None, transport: str | None = None) -> NcclEnv:
    """The NCCL environment a job on ``cluster`` runs with: ``env`` (the job's own variables) over the settings
    of the cluster's platform (:func:`gpuwait.transport.platforms.cluster_platform`; ``transport``: a scenario
    case's transport instead of the cluster's), under the cluster's NCCL release (``nccl.version``).

    >>> from gpuwait.topology import preset_spec
    >>> cluster_env(preset_spec("dgx-h100")).release_from
    'NCCL default'
    """
    platform = cluster_platform(cluster, transport)
    parsed = parse_env(dict(env or {}), platform).with_version(cluster.nccl.version, "nccl.version")
    fitted = cluster.calibration.nccl_env
    if fitted is None:
        return parsed
    return replace(parsed, calibration_note=calibration_env_note(fitted, dict(env or {}), platform))


def calibration_env_note(fitted: Mapping[str, str], env: Mapping[str, str], platform: Platform | None = None) -> str | None:
    """The note of a prediction under ``env`` on a cluster whose calibration was fitted to logs run under
    ``fitted`` (its ``calibration.nccl_env``), when the two set NCCL apart (under the same ``platform``);
    None when they do not. The calibration's variables are not applied: its values are the cluster's
    physics (a launch cost, a NIC's efficiency), meant for every algorithm NCCL picks, while the logs'
    variables are how a benchmark was run (``NCCL_ALGO=Ring`` to time one algorithm); applied, they would
    force that choice on every prediction, a training step's collectives included, which have no
    ``--env`` to undo it. So the note names the difference, and whoever wants the logs' conditions passes them.

    >>> calibration_env_note({"NCCL_ALGO": "Ring"}, {"NCCL_DEBUG": "INFO"})
    'the calibration was fitted to logs run with NCCL_ALGO=Ring (calibration.nccl_env); this prediction runs with NCCL_ALGO unset: the fitted values were not checked there (give the same variables to predict as the logs ran)'
    >>> calibration_env_note({"NCCL_ALGO": "Ring"}, {"NCCL_ALGO": "ring"}) is None
    True
    """
    def model(variables: Mapping[str, str]) -> NcclEnv:
        # what changes a prediction: not where a value came from, nor the variables gpuwait does not model
        return replace(parse_env(variables, platform), explicit=(), set_by={}, extra={})

    try:
        fitted_model = model(fitted)
    except SpecError as err:
        raise SpecError(f"calibration.nccl_env: {err}", hint="write the variables `gpuwait calibrate --env` took") from None
    # NCCL reads its values case-insensitively (NCCL_ALGO=ring is Ring), which the parsed values keep verbatim
    names = sorted(n for n in {*fitted, *env} if n in VARIABLES
                   and fitted.get(n, "").strip().lower() != env.get(n, "").strip().lower())
    if not names or model(env) == fitted_model:
        return None

    def shown(variables: Mapping[str, str]) -> str:
        return ", ".join(f"{n}={variables[n]}" if variables.get(n, "").strip() else f"{n} unset" for n in names)

    return (f"the calibration was fitted to logs run with {shown(fitted)} (calibration.nccl_env); this prediction "
            f"runs with {shown(env)}: the fitted values were not checked there (give the same variables to predict "
            "as the logs ran)")


def parse_env(env: Mapping[str, str], platform: Platform | None = None) -> NcclEnv:
    """Parse the ``NCCL_*`` entries of a mapping such as ``os.environ`` into an :class:`NcclEnv`, under the
    defaults of ``platform`` (:func:`with_platform`; the one place a platform's settings meet the job's).

    Raises
    ------
    SpecError
        A value NCCL would not accept (one line: variable, value, what was expected).

    Examples
    --------
    >>> env = parse_env({"NCCL_PROTO": "^LL128", "NCCL_DEBUG": "INFO", "NCCL_IB_TC": "41"})
    >>> sorted(env.allowed_protocols("all_gather")), env.ignored, env.no_timing
    (['LL', 'Simple'], ('NCCL_IB_TC',), ('NCCL_DEBUG',))
    >>> parse_env({"NCCL_IB_QPS_PER_CONNECTION": "0"})
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: NCCL_IB_QPS_PER_CONNECTION: got '0'; expected an integer from 1 to 128
    """
    env, set_by = with_platform(env, platform)
    values: dict[str, object] = {}
    extra: dict[str, str] = {}
    explicit: set[str] = set()
    # Aliases first so that the canonical name, if also set, wins.
    for name in sorted(env, key=lambda n: (n not in _ALIASES, n)):
        if not name.startswith("NCCL_"):
            continue
        raw = env[name]
        if name not in VARIABLES:
            extra[name] = raw
            continue
        text = str(raw).strip()
        if text == "":
            continue  # NCCL treats an empty value as unset
        attr, parse = VARIABLES[name]
        values[attr] = parse(name, text)
        explicit.add(_ALIASES.get(name, name))
    _refuse_not_modelled(values)
    # each value has its field's type (VARIABLES pairs every field with the parser of that type), which a dict
    # keyed at run time cannot show mypy; the checks below read the built environment's typed fields
    parsed = NcclEnv(**cast(dict[str, Any], values), extra=extra, explicit=tuple(sorted(explicit)), platform=platform,
                     set_by=set_by)
    low, high = parsed.min_nchannels, parsed.max_nchannels
    if low is not None and high is not None and low > high:
        raise SpecError(f"NCCL_MIN_NCHANNELS: got {low} with NCCL_MAX_NCHANNELS={high}; expected min <= max")
    threads, socks = parsed.socket_nthreads, parsed.nsocks_perthread
    if threads is not None and socks is not None and threads * socks > MAX_SOCKETS:
        raise SpecError(f"NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD: got {threads} x {socks}; "
                        f"expected a product of at most {MAX_SOCKETS}")
    return parsed


def _refuse_not_modelled(values: Mapping[str, object]) -> None:
    """One line for the first variable of :data:`NOT_MODELLED` set to something other than its default."""
    base = NcclEnv()
    for name, why in NOT_MODELLED.items():
        attr = VARIABLES[name][0]
        if attr in values and values[attr] != getattr(base, attr):
            raise SpecError(f"{name}: got {int(bool(values[attr]))}; {why}",
                            hint=f"unset {name} (or set it to {int(bool(getattr(base, attr)))})")


def check_modelled(names: Iterable[str], what: str = "env") -> None:
    """Refuse an ``NCCL_*`` name gpuwait does not model (a name given on purpose should change the result).

    >>> check_modelled(["NCCL_ALGO", "NCCL_CUMEM_ENABLE"])
    >>> check_modelled(["NCCL_IB_HCA"])
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: env: NCCL_IB_HCA is not modelled; modelled NCCL variables: ...
    """
    for name in names:
        if str(name).startswith("NCCL_") and name not in VARIABLES and name not in NO_TIMING_EFFECT:
            raise SpecError(f"{what}: {name} is not modelled; modelled NCCL variables: "
                            + ", ".join(sorted(n for n in VARIABLES if n not in NOT_MODELLED))
                            + "; accepted at NCCL's default only: "
                            + ", ".join(f"{n}={int(bool(getattr(NcclEnv(), VARIABLES[n][0])))}"
                                        for n in sorted(NOT_MODELLED)))


def env_pairs(pairs: Iterable[str]) -> dict[str, str]:
    """``--env NAME=VALUE`` pairs as a mapping (a later pair overrides an earlier one with the same name),
    each name an ``NCCL_*`` variable gpuwait models (:func:`check_modelled`).

    Examples
    --------
    >>> env_pairs(["NCCL_ALGO=Tree", "NCCL_ALGO=Ring"])
    {'NCCL_ALGO': 'Ring'}
    >>> env_pairs(["NCCL_ALGO"])
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: env: got 'NCCL_ALGO'; expected NAME=VALUE, e.g. NCCL_ALGO=Ring
    """
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = str(pair).partition("=")
        name = name.strip()
        if not sep or not name:
            raise SpecError(f"env: got {pair!r}; expected NAME=VALUE, e.g. NCCL_ALGO=Ring")
        if not name.startswith("NCCL_"):  # NCCL reads only NCCL_* names: another would be ignored in silence
            raise SpecError(f"env: got {pair!r}; expected an NCCL_* variable, e.g. NCCL_ALGO=Ring")
        check_modelled([name])
        env[name] = value
    return env


def parse_env_pairs(pairs: Iterable[str]) -> NcclEnv:
    """Parse ``--env NAME=VALUE`` pairs (:func:`env_pairs`).

    Examples
    --------
    >>> parse_env_pairs(["NCCL_ALGO=Tree", "NCCL_ALGO=Ring"]).algo
    'Ring'
    """
    return parse_env(env_pairs(pairs))


def apply_env(env: NcclEnv, inputs: TuningInputs) -> TuningInputs:
    """The tuning inputs as ``env`` changes them: NVLS / CollNet switches, ``NCCL_NET_OVERHEAD`` and the
    NCCL release (``env.release``).

    ``NCCL_NVLS_ENABLE=0`` removes NVLS; ``NCCL_COLLNET_ENABLE`` must be 1 for CollNet (and multi-node
    NVLS). Channel limits are not folded in: NCCL applies them to the communicator, not to the search
    graphs its cost model reads.

    Examples
    --------
    >>> from gpuwait.collectives.tuning import dgx_h100
    >>> apply_env(parse_env_pairs(["NCCL_NVLS_ENABLE=0"]), dgx_h100()).nvls_available
    False
    """
    return replace(inputs, nvls_available=inputs.nvls_available and env.nvls_enable != 0,
                   collnet_available=inputs.collnet_available and env.collnet_enable, release=env.release,
                   net_overhead_us=inputs.net_overhead_us if env.net_overhead_ns is None else env.net_overhead_ns * 1e-3)


def choose_with_env(env: NcclEnv, inputs: TuningInputs, n_bytes: int) -> tuple[str, str, Prediction]:
    """NCCL's (algorithm, protocol, prediction) for ``inputs`` under ``env`` (NCCL_ALGO, NCCL_PROTO...).

    Examples
    --------
    >>> from gpuwait.collectives.tuning import dgx_h100
    >>> choose_with_env(parse_env_pairs(["NCCL_ALGO=Ring"]), dgx_h100(), 2**30)[:2]
    ('ring', 'Simple')
    """
    return choose(apply_env(env, inputs), n_bytes, allowed_algos=env.algo, allowed_protos=env.proto)


def defaults() -> dict[str, object]:
    """NCCL's defaults of the modelled variables, by env name (None: NCCL decides per platform).

    Examples
    --------
    >>> defaults()["NCCL_NVLS_ENABLE"], defaults()["NCCL_IB_QPS_PER_CONNECTION"]
    (2, 1)
    """
    base = NcclEnv()
    by_field = {f.name: getattr(base, f.name) for f in fields(NcclEnv)}
    return {name: by_field[attr] for name, (attr, _) in VARIABLES.items() if name not in _ALIASES}


# --------------------------------------------------------------------------------------------------
# Who owns a setting (issue 20). A modelled setting has one owner and one precedence, highest first:
# the NCCL environment of the job (``perf --env`` and the process environment), then the cluster file
# (or the preset it starts from), then NCCL's default. The fabric's own properties (hashing, router
# kind) belong to the cluster file alone.

#: ``with_version``'s ``what`` -> the source printed beside the value; a caller's argument (``nccl_version``)
#: is named as the caller wrote it, and the command line names its option (cli.common.API_OPTIONS)
SETTING_SOURCES = {"nccl.version": "cluster file", "NCCL version": "NCCL version"}


@dataclass(frozen=True)
class Setting:
    """A setting's value and where it came from, printed as ``value (from: source)``.

    >>> str(Setting("qps_per_connection", 4, "cluster file"))
    '4 (from: cluster file)'
    """

    name: str
    value: object
    source: str

    def __str__(self) -> str:
        return f"{self.value} (from: {self.source})"


def qps_setting(env: NcclEnv, routing: RoutingSpec) -> Setting:
    """QPs per connection, owned by NCCL (``NCCL_IB_QPS_PER_CONNECTION`` is the job's setting): the NCCL
    environment when it sets the variable, else the cluster file's ``routing.qps_per_connection`` (the
    value the cluster's jobs run with), else NCCL's default, 1.

    >>> qps_setting(NcclEnv(), RoutingSpec(qps_per_connection=4))
    Setting(name='qps_per_connection', value=4, source='cluster file')
    >>> qps_setting(parse_env_pairs(["NCCL_IB_QPS_PER_CONNECTION=2"]), RoutingSpec(qps_per_connection=4)).source
    'NCCL env'
    >>> qps_setting(NcclEnv(), RoutingSpec()).source
    'NCCL default'
    """
    if "NCCL_IB_QPS_PER_CONNECTION" in env.explicit:
        return Setting("qps_per_connection", env.ib_qps_per_connection, "NCCL env")
    if "qps_per_connection" in routing.model_fields_set:
        return Setting("qps_per_connection", routing.qps_per_connection, "cluster file")
    return Setting("qps_per_connection", env.ib_qps_per_connection, "NCCL default")


def env_setting(env: NcclEnv, name: str, attr: str, default: str) -> Setting:
    """A setting NCCL's environment may force (``NCCL_ALGO``...) and that otherwise ``default`` decides.

    >>> str(env_setting(parse_env_pairs(["NCCL_ALGO=Ring"]), "NCCL_ALGO", "algo", "NCCL tuning model"))
    'Ring (from: NCCL env)'
    """
    if name in env.explicit:
        return Setting(name, getattr(env, attr), env.set_by.get(name, "NCCL env"))
    return Setting(name, "auto", default)


def platform_setting(env: NcclEnv) -> Setting:
    """The platform whose settings apply, what it set (the job's own values win) and what it sets that gpuwait
    does not model, for ``perf``'s header and ``--json``.

    >>> from gpuwait.transport.platforms import PLATFORMS
    >>> print(platform_setting(parse_env({}, PLATFORMS["p4de.24xlarge"])))  # doctest: +ELLIPSIS
    p4de.24xlarge: NCCL_PROTO=Simple; not modelled: NCCL_BUFFSIZE=8388608, ... (from: aws-ofi-nccl src/platform-aws.c, ...)
    >>> str(platform_setting(NcclEnv()))
    'none (from: cluster file: transport)'
    """
    platform = env.platform
    if platform is None:
        return Setting("platform", "none", "cluster file: transport")
    applied = ", ".join([*(f"{name}={platform.env[name]}" for name in env.set_by),
                         *(f"{name}={value}" for name, value in platform.provider.items())]) \
        or "nothing (the job sets it all)"
    ignored = ", ".join(f"{name}={value}" for name, value in platform.not_modelled.items())
    value = f"{platform.name}: {applied}" + (f"; not modelled: {ignored}" if ignored else "")
    return Setting("platform", value, platform.source)
