"""The simulators, behind one interface.

:mod:`.flow` is the fluid engine (max-min fair sharing over links and weighted flows),
:mod:`.flow_run` routes a flow table onto it; :mod:`.packet` simulates the same flow table packet
by packet. Both return an :class:`~gpuwait.engine.base.EngineRun`; :data:`ENGINES` names them.
Nothing about collectives or training steps lives here: those layers are built on top
(:mod:`gpuwait.fabric`, :mod:`gpuwait.steps`).
"""

from gpuwait.engine.base import ENGINES, Engine, EngineRun, effective_capacity_Bps, get_engine, register_engine

__all__ = ["ENGINES", "Engine", "EngineRun", "effective_capacity_Bps", "get_engine", "register_engine"]
