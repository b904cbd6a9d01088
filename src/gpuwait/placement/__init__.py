"""Where a job's servers are: placement policies named after real schedulers, over the fabric's tree."""

from gpuwait.placement.policies import POLICIES, PlacementError, place
from gpuwait.placement.tree import FabricTree, fabric_tree, hostlist

__all__ = ["POLICIES", "FabricTree", "PlacementError", "fabric_tree", "hostlist", "place"]
