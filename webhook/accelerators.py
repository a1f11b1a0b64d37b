"""The extended resources that count as accelerators (GPUs and their kin).

The PlatformConfig's `accelerators` list (resource names, or prefixes ending in "*"; NVIDIA whole
GPUs, shared GPUs and MIG slices, AMD, Intel Gaudi, Google TPU and AWS Neuron by default) is the one
definition: the adapters count GPUs with it, the engine's node-level skip asks it whether an agent's
Pod requests accelerators, and `webhookconfig` renders the same list into the `not-node-level`
matchCondition, so the API server and the engine draw the line in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from webhook.config import PlatformConfig

AcceleratorTest = Callable[[str], bool]


def split_names(names: Iterable[str]) -> tuple[frozenset[str], tuple[str, ...]]:
    """The whole names and the prefixes (the entries ending in "*", without it)."""
    names = tuple(names)
    return (
        frozenset(n for n in names if not n.endswith("*")),
        tuple(n[:-1] for n in names if n.endswith("*")),
    )


def accelerator_test(names: Iterable[str]) -> AcceleratorTest:
    """Whether a resource counts as an accelerator under `names`: whole names, or prefixes ending in "*"."""
    exact, prefixes = split_names(names)
    memo: dict[str, bool] = {}

    def test(resource: str) -> bool:
        known = memo.get(resource)
        if known is None:
            known = resource in exact or (bool(prefixes) and resource.startswith(prefixes))
            if len(memo) < 4096:  # resource names are few; never grow without bound
                memo[resource] = known
        return known

    return test


# A PlatformConfig holds a dict, so it is not hashable: its test is kept by the object's id, beside
# the object itself (no other object can take that id while the entry holds it).
_TESTS: dict[int, tuple[PlatformConfig, AcceleratorTest]] = {}


def accelerators_of(config: PlatformConfig) -> AcceleratorTest:
    """The accelerator test of the config's `accelerators` list, made once per config."""
    known = _TESTS.get(id(config))
    if known is not None and known[0] is config:
        return known[1]
    if len(_TESTS) >= 16:  # configs are reloaded rarely; old ones are dropped
        _TESTS.clear()
    test = accelerator_test(config.accelerators)
    _TESTS[id(config)] = (config, test)
    return test
