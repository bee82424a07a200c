"""The alerts of runs as one list: pending ones from the rule evaluator (Prometheus, or Thanos Ruler through the
querier) with the annotations it renders, firing ones with their state in Alertmanager (active, silenced, inhibited)
and their annotations; and silences of a run.

Prometheus is read with :class:`otel_rl_ops.query.Prometheus` and queries from :mod:`otel_rl_ops.promql` (the run
id quoted); Alertmanager over its v2 API (``/api/v2/alerts``, ``/api/v2/silences``), filtered on this side by exact
label equality, so a run id needs no escaping there.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final, Literal

import otel_rl_contract as contract
import requests
from otel_rl_contract import foreign

from otel_rl_ops import promql
from otel_rl_ops.query import DEFAULT_TIMEOUT_S, Prometheus, QueryError

AlertState = Literal["pending", "firing", "silenced", "inhibited"]
"""``pending``: its condition holds, not yet for the rule's ``for``; ``firing``: sent and delivered to receivers;
``silenced`` / ``inhibited``: firing, but Alertmanager holds its notifications back (a silence, or another alert of
the incident that pages instead)."""

RUN_LABEL: Final = contract.label(contract.RUN_ID)
"""The label that names a run on every series and alert (``rl.run.id``)."""

_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT_S: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration_seconds(text: str) -> float:
    """Seconds of a Prometheus-style duration: ``"2h"``, ``"90m"``, ``"1h30m"``, ``"1d"``.

    >>> duration_seconds("1h30m")
    5400.0

    Raises:
        ValueError: when ``text`` is not such a duration, or is zero.
    """
    parts = _DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text or not any(int(n) for n, _ in parts):
        raise ValueError(f'a duration must be like "2h", "30m" or "1h30m" and above 0, got {text!r}')
    return float(sum(int(number) * _UNIT_S[unit] for number, unit in parts))


@dataclass(frozen=True, kw_only=True)
class RunAlert:
    """One alert of one run, as :func:`run_alerts` reports it."""

    name: str
    """The alert's name (``alertname``), e.g. ``"RLStalenessHigh"``."""
    state: AlertState
    """Where it stands (:data:`AlertState`)."""
    labels: Mapping[str, str]
    """Its labels (``rl_run_id``, ``severity``, ``signal``, ...), without ``alertname`` and ``alertstate``."""
    since: float | None
    """Unix seconds since when its condition holds (pending) or it fires; ``None`` when unknown."""
    summary: str
    """Its ``summary`` annotation, with the measured value (pending: as the evaluator rendered it at its last
    evaluation); ``""`` only where no annotations could be read (an evaluator without the alerts API)."""
    annotations: Mapping[str, str]
    """All of its annotations (``description``, ``runbook_url``, ``dashboard_url``)."""
    held_by: tuple[str, ...] = ()
    """What holds its notifications back: the ids of the silences, or the names of the inhibiting alerts."""

    @property
    def run_id(self) -> str:
        """The run (``rl_run_id``), ``""`` for an alert about no run (the collector's own)."""
        return self.labels.get(RUN_LABEL, "")


class Alertmanager:
    """Alertmanager's v2 API at ``url``, e.g. ``http://127.0.0.1:9093``. Failures are :class:`QueryError`."""

    def __init__(
        self, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, session: requests.Session | None = None
    ) -> None:
        """``session`` carries what the server asks for, e.g. basic auth and a private CA (``session.auth``,
        ``session.verify``) for the secure profile."""
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.session = session

    def _request(self, method: str, path: str, *, body: Any = None) -> Any:
        what = f"Alertmanager {method} {path}"
        try:
            client = self.session or requests
            response = client.request(method, f"{self.url}{path}", json=body, timeout=self.timeout_s)
        except requests.RequestException as error:
            raise QueryError(f"{what} failed: {error}") from error
        if response.status_code != 200:
            raise QueryError(f"{what} failed: HTTP {response.status_code} {response.text[:300]!r}")
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as error:
            raise QueryError(f"{what} failed: not JSON: {response.text[:300]!r}") from error

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert Alertmanager holds (active, silenced, inhibited and unprocessed), as its API returns them:
        ``labels``, ``annotations``, ``startsAt``, ``fingerprint``, ``status`` (``state``, ``silencedBy``,
        ``inhibitedBy``)."""
        return list(self._request("GET", "/api/v2/alerts"))

    def post_alerts(self, alerts: Sequence[Mapping[str, Any]]) -> None:
        """Send alerts as a rule evaluator does (``labels``, ``annotations``, optional ``startsAt`` / ``endsAt``)."""
        self._request("POST", "/api/v2/alerts", body=list(alerts))

    def silence(self, labels: Mapping[str, str], *, duration_s: float, created_by: str, comment: str) -> str:
        """Silence, from now for ``duration_s`` seconds, every alert whose labels equal ``labels`` (exact matches);
        returns the silence's id."""
        now = time.time()
        body = {
            "matchers": [{"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in labels.items()],
            "startsAt": _iso(now),
            "endsAt": _iso(now + duration_s),
            "createdBy": created_by,
            "comment": comment,
        }
        return str(self._request("POST", "/api/v2/silences", body=body)["silenceID"])

    def silences(self) -> list[dict[str, Any]]:
        """Every silence (active, pending and expired): ``id``, ``matchers``, ``startsAt``, ``endsAt``, ``status``."""
        return list(self._request("GET", "/api/v2/silences"))


def run_alerts(prometheus: Prometheus, alertmanager: Alertmanager, run_id: str | None = None) -> list[RunAlert]:
    """The pending and firing alerts of run ``run_id`` (every run's when ``None``), firing before pending, then by
    run, name and labels.

    The rule evaluator's alerts come from its alerts API (``/api/v1/alerts``): one snapshot of each alert's state,
    start and annotations, rendered with its value (Alertmanager never sees a pending alert, and the ``ALERTS``
    series carry no annotations); from the ``ALERTS`` and ``ALERTS_FOR_STATE`` series, without annotations, where
    that API cannot be read. A firing alert takes its state, start and annotations from Alertmanager; one that the
    evaluator has but Alertmanager not yet (or not at all: it is down) counts as firing. Alertmanager's alerts carry
    the evaluator's external labels too, so the two are matched on the evaluator's labels.

    Raises:
        QueryError: when Prometheus or Alertmanager cannot be asked.
    """
    evaluated = _evaluated(prometheus, run_id)
    held = [
        alert for alert in alertmanager.alerts() if run_id is None or alert.get("labels", {}).get(RUN_LABEL) == run_id
    ]
    names = {alert["fingerprint"]: alert["labels"].get("alertname", "") for alert in held}
    found: list[RunAlert] = []
    matched: set[str] = set()
    for metric, state, since, rendered in evaluated:
        managed = next((a for a in held if _subset(metric, a["labels"]) and a["fingerprint"] not in matched), None)
        if state == "pending" or managed is None:
            found.append(_from_rule(metric, state, since, rendered))
            continue
        matched.add(managed["fingerprint"])
        found.append(_from_alertmanager(managed, names))
    found += [_from_alertmanager(alert, names) for alert in held if alert["fingerprint"] not in matched]
    order = {"firing": 0, "inhibited": 1, "silenced": 2, "pending": 3}
    return sorted(found, key=lambda a: (order[a.state], a.run_id, a.name, sorted(a.labels.items())))


_Evaluated = tuple[dict[str, str], AlertState, float | None, dict[str, str]]
"""One alert of the rule evaluator: its labels (``alertname`` included), state, start (unix seconds) and annotations."""


def _evaluated(prometheus: Prometheus, run_id: str | None) -> list[_Evaluated]:
    """The evaluator's pending and firing alerts of the run: from its alerts API, else from the ``ALERTS`` series."""
    try:
        active = prometheus.alerts()
    except QueryError:
        active = None
    if active is not None:
        return [
            (
                dict(alert["labels"]),
                "pending" if alert.get("state") == "pending" else "firing",
                _unix(alert.get("activeAt")),
                dict(alert.get("annotations") or {}),
            )
            for alert in active
            if run_id is None or alert["labels"].get(RUN_LABEL) == run_id
        ]
    labels = {} if run_id is None else {RUN_LABEL: run_id}
    since = {
        _key(item["metric"]): float(item["value"][1])
        for item in prometheus.query(promql.selector(foreign.ALERTS_FOR_STATE, **labels))
    }
    found: list[_Evaluated] = []
    for item in prometheus.query(promql.selector(foreign.ALERTS, **labels)):
        metric = {k: v for k, v in item["metric"].items() if k != "__name__"}
        state: AlertState = "pending" if metric.pop("alertstate", "firing") == "pending" else "firing"
        found.append((metric, state, since.get(_key(metric)), {}))
    return found


def _key(metric: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The identity of an alert series: its labels without the series name and ``alertstate``."""
    return tuple(sorted((k, v) for k, v in metric.items() if k not in ("__name__", "alertstate")))


def _subset(labels: Mapping[str, str], other: Mapping[str, str]) -> bool:
    return all(other.get(name) == value for name, value in labels.items())


def _from_rule(
    metric: Mapping[str, str], state: AlertState, since: float | None, annotations: Mapping[str, str]
) -> RunAlert:
    labels = {k: v for k, v in metric.items() if k != "alertname"}
    return RunAlert(
        name=metric.get("alertname", ""),
        state=state,
        labels=labels,
        since=since,
        summary=annotations.get("summary", ""),
        annotations=dict(annotations),
    )


def _from_alertmanager(alert: Mapping[str, Any], names: Mapping[str, str]) -> RunAlert:
    status = alert.get("status") or {}
    silenced = tuple(status.get("silencedBy") or ())
    inhibited = tuple(sorted({names.get(f, f) for f in status.get("inhibitedBy") or ()}))
    state: AlertState = "silenced" if silenced else "inhibited" if inhibited else "firing"
    labels = {k: v for k, v in alert["labels"].items() if k != "alertname"}
    annotations = dict(alert.get("annotations") or {})
    return RunAlert(
        name=alert["labels"].get("alertname", ""),
        state=state,
        labels=labels,
        since=_unix(alert.get("startsAt")),
        summary=annotations.get("summary", ""),
        annotations=annotations,
        held_by=silenced or inhibited,
    )


def _iso(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _unix(text: str | None) -> float | None:
    """Unix seconds of an RFC 3339 time as Alertmanager writes it (``...T14:02:11.123Z``; fractions beyond
    microseconds cut, which Python 3.10's parser refuses); ``None`` for no or another text."""
    match = re.fullmatch(r"([^.Z+]+)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text or "")
    if match is None:
        return None
    whole, fraction, zone = match.groups()
    try:
        parsed = datetime.fromisoformat(f"{whole}{'.' + fraction[:6].ljust(6, '0') if fraction else ''}")
    except ValueError:
        return None
    offset = 0 if zone == "Z" else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 3600 + int(zone[4:]) * 60)
    return parsed.replace(tzinfo=timezone.utc).timestamp() - offset
