"""Which alerts a run raised over its life, and when: read from the ``ALERTS`` series the rule engine stores.

Prometheus (or Thanos Ruler) writes ``ALERTS{alertname, alertstate, ...}`` at every evaluation while an alert is pending
or firing; for a replayed run, ``otel-rl replay`` wrote the same series with Prometheus's own rule engine run over the
run's past (``backfill/rules.go``). Either way this reads them back, nothing re-evaluated: one entry per alert (its
labels but the state and the window it was judged over), with when it was first pending, first firing and last
firing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

import otel_rl_contract as contract
from otel_rl_contract import foreign, rules

from otel_rl_ops import promql
from otel_rl_ops.query import Prometheus

_NOT_ITS_OWN: Final = frozenset(("__name__", "alertstate", rules.WINDOW_LABEL))
"""Labels that do not tell alerts apart: the series name, the state, and the window the alert was judged over (one
alert moves between its windows' rules as the run's pace changes, and when the run ends)."""

LOOKBACK: Final = "30d"
"""How far back the series are read: longer than the stack's Prometheus keeps anything (15 days)."""


@dataclass(frozen=True)
class AlertSpan:
    """One alert of a run over the range read."""

    name: str
    labels: dict[str, str]
    """Its labels but ``alertname``, ``alertstate`` and ``window`` (``severity``, ``signal``, ...)."""
    pending_at: float
    """Unix time of its first ``ALERTS`` sample (pending or firing)."""
    fired_at: float | None
    """Unix time it was first firing; None: pending only, its ``for`` never ran out."""
    last_firing_at: float | None

    @property
    def title(self) -> str:
        """The alert's name and, when it has one, the signal that raised it: ``RLStalenessHigh (staleness_p99)``."""
        signal = self.labels.get("signal")
        return f"{self.name} ({signal})" if signal else self.name

    @property
    def when(self) -> str:
        """When it was pending and firing, in words (UTC)."""
        fired = (
            "never fired (pending only)"
            if self.fired_at is None or self.last_firing_at is None
            else f"fired {_utc(self.fired_at)} until {_utc(self.last_firing_at)}"
        )
        return f"pending {_utc(self.pending_at)}, {fired}"


def _utc(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


def alert_history(prometheus: Prometheus, run_id: str, *, at: float | None = None) -> list[AlertSpan]:
    """Every alert of run ``run_id`` in the ``ALERTS`` series up to ``at`` (default: now), in the order they began."""
    active: dict[tuple[tuple[str, str], ...], list[float]] = {}
    firing: dict[tuple[tuple[str, str], ...], list[float]] = {}
    for series in prometheus.query(
        f"{promql.selector(foreign.ALERTS, **{contract.label(contract.RUN_ID): run_id})}[{LOOKBACK}]", at
    ):
        labels = {key: value for key, value in series["metric"].items() if key not in _NOT_ITS_OWN}
        times = [float(point[0]) for point in series.get("values") or () if float(point[1]) == 1]
        key = tuple(sorted(labels.items()))
        if times:
            active.setdefault(key, []).extend(times)
            if series["metric"].get("alertstate") == "firing":
                firing.setdefault(key, []).extend(times)
    found = [
        AlertSpan(
            name=dict(key)["alertname"],
            labels={k: v for k, v in key if k != "alertname"},
            pending_at=min(times),
            fired_at=min(firing[key]) if key in firing else None,
            last_firing_at=max(firing[key]) if key in firing else None,
        )
        for key, times in active.items()
    ]
    return sorted(found, key=lambda alert: (alert.pending_at, alert.name))
