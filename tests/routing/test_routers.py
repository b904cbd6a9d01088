"""The router registry: every routing kind registers its chooser; the walk only calls it."""

import typing

import numpy as np
import pytest

from gpuwait.errors import UnknownNameError
from gpuwait.routing.paths import route_flows
from gpuwait.routing.routers import ROUTERS, NextHops, get_router, register_router
from gpuwait.spec import RoutingSpec
from gpuwait.topology import build_preset


def test_every_routing_kind_has_a_router():
    kinds = typing.get_args(RoutingSpec.model_fields["kind"].annotation)
    assert set(kinds) == set(ROUTERS)


def test_unknown_router_lists_the_known_ones():
    with pytest.raises(UnknownNameError) as err:
        get_router("valiant")
    assert "ecmp" in err.value.hint


def test_a_new_router_is_one_registration():
    @register_router("first-choice", single_path=True)
    def _first(hop):
        return NextHops(np.arange(len(hop.node)), hop.links[hop.first], hop.frac)

    try:
        topo = build_preset("rocev2-400g-2tier", servers=8)
        spec = RoutingSpec.model_construct(**(RoutingSpec().model_dump() | {"kind": "first-choice"}))
        routes = route_flows(topo, spec, ["s0.gpu0", "s1.gpu0"], ["s4.gpu0", "s5.gpu0"])
        # the first candidate is the lowest link id: both flows leave their leaf on the same spine
        spines = [[n for n in (topo.link_name(x) for x in routes.ordered_links(r, topo)[0]) if n.startswith("leaf")][0]
                  for r in range(2)]
        assert spines[0].split("->")[1] == spines[1].split("->")[1]
        with pytest.raises(ValueError):
            register_router("first-choice", single_path=True)(_first)
    finally:
        del ROUTERS["first-choice"]
