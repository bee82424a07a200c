"""The Prometheus series each metric of the contract becomes, derived here once from its OpenTelemetry name, kind
and unit.

The collector's ``prometheusremotewrite`` exporter names series with Prometheus's ``otlptranslator``
(``UnderscoreEscapingWithSuffixes``, v1.0.0 in the collector this project builds): the name split at every character
outside ``[a-zA-Z0-9:]``, the unit's suffix appended unless the name holds it already (``s`` → ``seconds``,
``{flop}/s`` → ``per_second``; annotations in braces are dropped), ``_total`` on monotonic counters. Attribute keys
become labels with every other character replaced by ``_``. Explicit histograms arrive as ``_bucket``, ``_count``
and ``_sum`` series, exponential ones as one native histogram under the name itself.

    >>> from otel_rl_contract import names
    >>> series(names.REWARDS.histogram).name, series(names.GROUPS).name, series(names.PHASE_STARTED).name
    ('rl_reward', 'rl_groups_total', 'rl_phase_started_seconds')
    >>> series(names.PHASE_DURATION).bucket, series(names.FLOPS_PEAK).name, label(names.REWARD_FN)
    ('rl_phase_duration_seconds_bucket', 'rl_flops_peak_per_second', 'rl_reward_fn')
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from otel_rl_contract.names import Distribution, HistogramForm, Kind, MetricName

_UNITS = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "ns": "nanoseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "MiBy": "mebibytes",
    "GiBy": "gibibytes",
    "TiBy": "tibibytes",
    "KBy": "kilobytes",
    "MBy": "megabytes",
    "GBy": "gigabytes",
    "TBy": "terabytes",
    "m": "meters",
    "V": "volts",
    "A": "amperes",
    "J": "joules",
    "W": "watts",
    "g": "grams",
    "Cel": "celsius",
    "Hz": "hertz",
    "1": "",
    "%": "percent",
}
"""otlptranslator's ``unitMap``: an OpenTelemetry unit → its Prometheus suffix."""
_PER_UNITS = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year"}
"""otlptranslator's ``perUnitMap``: the unit after ``/`` → the word after ``per_``."""
_INVALID = re.compile(r"[^a-zA-Z0-9:]+")
_INVALID_LABEL = re.compile(r"[^a-zA-Z0-9_]")


@dataclass(frozen=True)
class Series:
    """The Prometheus series of one metric."""

    name: str
    """The series name: a gauge's, a counter's (with ``_total``), an exponential histogram's native one, a classic
    histogram's base name (its series are :attr:`bucket`, :attr:`count` and :attr:`sum`)."""
    kind: Kind
    description: str
    """What it holds."""

    @property
    def bucket(self) -> str:
        """An explicit histogram's bucket series (``le`` label)."""
        return f"{self.name}_bucket"

    @property
    def count(self) -> str:
        """An explicit histogram's count series (for a native histogram, ``histogram_count(name)``)."""
        return f"{self.name}_count"

    @property
    def sum(self) -> str:
        """An explicit histogram's sum series (for a native histogram, ``histogram_sum(name)``)."""
        return f"{self.name}_sum"

    def names(self, form: HistogramForm) -> frozenset[str]:
        """Every series name this metric writes, a histogram in ``form``."""
        if self.kind == "histogram" and form == "explicit":
            return frozenset({self.bucket, self.count, self.sum})
        return frozenset({self.name})


def series(metric: MetricName) -> Series:
    """The Prometheus series of ``metric``, as the collector's exporter names them."""
    return Series(_name(metric.name, metric.unit, kind=metric.kind), metric.kind, metric.description)


def exemplar_series(histogram: MetricName) -> Series:
    """The series of ``histogram``'s exemplar carrier: the collector's ``transform/exemplar_series`` renames a copy
    of it to ``<name>.exemplars`` (the histograms of :data:`~otel_rl_contract.names.EXEMPLAR_CARRIERS`)."""
    return Series(
        _name(f"{histogram.name}.exemplars", histogram.unit, kind="histogram"),
        "histogram",
        f"{histogram.name} as merged in each collector flush, for its exemplars only (docs/contract.md, Exemplars).",
    )


def prometheus_names(
    metrics: Iterable[MetricName], form: HistogramForm, *, exemplars: Iterable[Distribution] = ()
) -> frozenset[str]:
    """Every series name ``metrics`` write, their histograms in ``form`` (a histogram of a fixed form in its own),
    with the exemplar carriers of ``exemplars``: what a run recording those metrics holds in Prometheus.

    >>> from otel_rl_contract import names
    >>> sorted(prometheus_names((names.STEP, names.PHASE_DURATION), "explicit"))
    ['rl_phase_duration_seconds_bucket', 'rl_phase_duration_seconds_count', 'rl_phase_duration_seconds_sum', 'rl_step']
    """
    derived = frozenset(name for metric in metrics for name in series(metric).names(metric.form or form))
    carriers = (exemplar_series(distribution.histogram) for distribution in exemplars)
    return derived | frozenset(name for carrier in carriers for name in carrier.names(form))


def label(attribute: str) -> str:
    """The Prometheus label an OpenTelemetry attribute key becomes (``rl.reward.fn`` → ``rl_reward_fn``)."""
    name = _INVALID_LABEL.sub("_", attribute)
    return f"key_{name}" if name[:1].isdigit() else name


def _name(name: str, unit: str, *, kind: Kind) -> str:
    """otlptranslator's ``normalizeName`` without a namespace (a counter is a monotonic sum)."""
    tokens = [token for token in _INVALID.split(name) if token]
    main, _, per = unit.partition("/")
    main, per = main.strip(), per.strip()
    main_suffix = _clean(_UNITS.get(main, main)) if main and not set("{}") & set(main) else ""
    per_suffix = _clean(_PER_UNITS.get(per, per)) if per and not set("{}") & set(per) else ""
    if main_suffix and main_suffix not in tokens:
        tokens.append(main_suffix)
    if per_suffix and f"per_{per_suffix}" not in tokens:
        tokens.append(f"per_{per_suffix}")
    last = "total" if kind == "counter" else "ratio" if unit == "1" and kind == "gauge" else None
    if last is not None:  # moved to the end, once
        tokens = [*(part for part in tokens if part != last), last]
    return "_".join(tokens)


def _clean(unit: str) -> str:
    """otlptranslator's ``cleanUpUnit``: invalid characters to one ``_``, no leading ``_``."""
    return re.sub(r"_+", "_", _INVALID_LABEL.sub("_", unit)).lstrip("_").rstrip("_")
