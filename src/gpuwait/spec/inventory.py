"""Scenario model of a cluster as its operators have it: real host, NIC and switch names and the cables.

``cluster.inventory`` lists the hosts (in server order), the NIC devices every host carries
(``mlx5_0``...), the switches with their tier and the cables between them, as `gpuwait inventory
import` writes them from ``ibnetdiscover``, LLDP, NCCL topology dumps or Slurm's ``topology.conf``.
With ``fabric.kind: inventory`` the compute fabric is built from these cables instead of a generated
Clos, and every node carries its real name (``node01.gpu3``, ``node01.mlx5_0``, ``ib-leaf-03``);
gpuwait's own names (``s0.gpu3``, ``s0.nic0``) stay accepted as aliases. Configuration holds no logic:
building the fabric is :mod:`gpuwait.topology.inventory`'s job.
"""

from __future__ import annotations

from pydantic import Field

from gpuwait.spec.cluster import SpecModel
from gpuwait.spec.types import RateBps


class InventorySwitch(SpecModel):
    """One switch of the compute fabric, under its real name."""

    name: str = Field(..., min_length=1, description="Switch name as operators use it (node description or hostname), e.g. ib-leaf-03.")
    tier: int = Field(..., ge=1, le=3, description="1 = leaf (cabled to hosts), 2 = spine, 3 = core.")
    guid: str | None = Field(None, description="InfiniBand node GUID (0x...), accepted as an alias of the switch.")
    lid: int | None = Field(None, ge=0, description="InfiniBand LID of the switch's port 0, accepted as the alias lidN.")


class InventoryCable(SpecModel):
    """One cable: a host NIC (``HOST.NIC``) or switch to a switch, each end with its port number when known."""

    a: str = Field(..., description="Lower end: a host NIC `HOST.NIC` (e.g. node01.mlx5_0) or a switch name.")
    b: str = Field(..., description="Upper end: a switch name.")
    a_port: int | str | None = Field(None, description="Port at end a: a switch port number (17) or name (Ethernet1/28), or an HCA port number.")
    b_port: int | str | None = Field(None, description="Port at end b (switch port number or name).")
    speed: RateBps | None = Field(None, description="Data rate of the cable per direction (e.g. 200Gbps for 4xHDR); default: server.nic_speed for host cables, fabric.switch_speed (or nic_speed) between switches.")


class InventorySpec(SpecModel):
    """Real names and cabling of a cluster (see docs/inventory.md)."""

    hosts: list[str] = Field(..., min_length=1, description="Host names in server order (server i of gpuwait is hosts[i]); cluster.servers must equal their number.")
    nics: list[str] = Field(default_factory=list, description="Compute NIC device names of every host, in NIC index order (e.g. [mlx5_0, mlx5_1]); length server.nics. Default nic0, nic1, ...")
    switches: list[InventorySwitch] = Field(default_factory=list, description="Switches of the compute fabric.")
    cables: list[InventoryCable] = Field(default_factory=list, description="Cables of the compute fabric (one entry per physical cable).")
    aliases: dict[str, str] = Field(default_factory=dict, description="Other names of nodes (GUIDs, `lidN`, Slurm names) -> node name.")
    sources: list[str] = Field(default_factory=list, description="Files the inventory was imported from, for the record; not used by the model.")
