"""Import a real cluster's inventory (ibnetdiscover, LLDP, NCCL topology dumps, Slurm topology.conf,
an explicit node/link file) as a cluster file whose nodes keep their real names. See docs/inventory.md."""

from gpuwait.inventory.build import Imported, Sources, import_inventory

__all__ = ["Imported", "Sources", "import_inventory"]
