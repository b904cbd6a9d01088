"""A field that takes a name or a list (``placement: packed | spread | [server indices]``) wrong in one shape is
reported in that shape only. Before, pydantic's two union branches both came out, the list refused as a name
('placement.literal['packed','spread']: got ['a', 0]; input should be 'packed' or 'spread'') beside the one
problem the user has ('placement.list[int][0]: got 'a'')."""

from __future__ import annotations

import pytest

from gpuwait.errors import SpecError
from gpuwait.spec import Scenario
from gpuwait.spec.load import validate_data


def _scenario(placement) -> dict:
    return {"cluster": {"preset": "rocev2-400g-2tier", "servers": 4},
            "workload": {"model": {"preset": "llama-8b"}, "parallel": {"tp": 8, "global_batch": 32, "placement": placement}}}


@pytest.mark.parametrize(("placement", "problem"), [
    (["a", 0], "workload.parallel.placement[0]: got 'a'; input should be a valid integer"),
    ("packd", "workload.parallel.placement: got 'packd'; input should be 'packed' or 'spread'"),
])
def test_a_union_is_reported_in_the_shape_the_value_has(placement, problem):
    with pytest.raises(SpecError) as err:
        validate_data(Scenario, _scenario(placement))
    assert len(err.value.problems) == 1 and err.value.problems[0].startswith(problem)


def test_a_value_of_no_choices_shape_keeps_every_choices_problem():
    """A mapping fits neither a name nor a list: both choices' problems are said, as pydantic says them."""
    with pytest.raises(SpecError) as err:
        validate_data(Scenario, _scenario({"a": 1}))
    assert len(err.value.problems) == 2
