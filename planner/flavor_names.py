"""The --model name of a torchtitan flavor, `torchtitan:<code>/<flavor>` (planner/torchtitan_registry.py holds the
flavors and re-exports these): here on its own so that telling such a name from a catalog name or a path imports
nothing of the registry (issue 24: `planner fit` on a catalog model does not import it; tests/test_start_up_cost.py)."""

MODEL_PREFIX = "torchtitan:"


def is_flavor_name(text) -> bool:
    return isinstance(text, str) and text.startswith(MODEL_PREFIX)
