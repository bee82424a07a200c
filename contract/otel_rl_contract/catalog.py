"""Every Prometheus series name otel-rl writes or reads, each declared once: the series of the contract's metrics
(derived, :mod:`otel_rl_contract.prometheus`), the recording rules' (:mod:`otel_rl_contract.rules`) and the foreign
ones read on purpose (:mod:`otel_rl_contract.foreign`).

The contract check (``tests/unit/test_contract_check.py``) fails on a name in the rules, the dashboards or the
collector configurations that is not here; ``docs/contract.md`` lists them (``docs/generate_sections.py``).

    >>> KNOWN_SERIES["rl_reward_bucket"].name, KNOWN_SERIES["rl:reward_mean:rate1m"].kind
    ('rl_reward', 'gauge')
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from otel_rl_contract.foreign import COLLECTOR_METRICS, FOREIGN_SERIES, spellings
from otel_rl_contract.names import ALL_METRICS, EXEMPLAR_CARRIERS, METRIC_ATTRIBUTES
from otel_rl_contract.prometheus import Series, exemplar_series, label, series
from otel_rl_contract.rules import RECORDING_RULES

DERIVED_SERIES: tuple[Series, ...] = (
    *map(series, ALL_METRICS),
    *(exemplar_series(distribution.histogram) for distribution in EXEMPLAR_CARRIERS),
)
"""The series of every metric of the contract, and the exemplar carriers, in the order of ``ALL_METRICS``."""


def _by_name(declared: tuple[Series, ...]) -> dict[str, Series]:
    """Each name a declaration may write (a histogram in both forms) → the declaration.

    Raises:
        ValueError: naming a series name two declarations share.
    """
    known: dict[str, Series] = {}
    for item in declared:
        for name in item.names("exponential") | item.names("explicit"):
            if known.setdefault(name, item) is not item:
                raise ValueError(f"the series name {name!r} is declared twice: {known[name]!r} and {item!r}")
    return known


KNOWN_SERIES: Mapping[str, Series] = MappingProxyType(
    {
        **_by_name((*DERIVED_SERIES, *RECORDING_RULES, *FOREIGN_SERIES)),
        **{name: metric for metric in COLLECTOR_METRICS for name in spellings(metric)},
    }
)
"""Every series name otel-rl writes or reads → its declaration (``rl_reward_bucket`` → the series of ``rl.reward``;
the collector's own metrics under every spelling, :func:`~otel_rl_contract.foreign.spellings`)."""

KNOWN_LABELS: frozenset[str] = frozenset(map(label, METRIC_ATTRIBUTES))
"""The labels the contract's attributes become (``rl_run_id``, ``rl_reward_fn``, ...)."""
