"""The receiving end of Alertmanager's webhook: an HTTP server that keeps every notification it is sent.

Alertmanager POSTs one JSON document per notification of a group (``status`` firing or resolved, ``groupLabels``,
``commonLabels``, and ``alerts`` with their ``labels``, ``annotations``, ``startsAt``, ``endsAt``). The demo starts one
to print the notification its run provoked, the tests to see what reached a receiver and when; point a stack at it
with ``StackConfig(alert_webhook_url=receiver.url)`` (``otel-rl stack up --alert-webhook URL``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Notification:
    """One webhook notification as it arrived."""

    received_at: float
    """Unix seconds when the request arrived."""
    body: dict[str, Any]
    """The JSON document Alertmanager sent."""

    @property
    def status(self) -> str:
        """``"firing"`` (some alert of the group fires) or ``"resolved"`` (all resolved)."""
        return str(self.body.get("status", ""))

    @property
    def alerts(self) -> list[dict[str, Any]]:
        """The group's alerts (``status``, ``labels``, ``annotations``, ``startsAt``, ``endsAt``)."""
        return list(self.body.get("alerts") or ())

    def alerts_named(self, name: str, *, status: str | None = None) -> list[dict[str, Any]]:
        """The alerts called ``name`` (``alertname``), only those in ``status`` unless ``None``."""
        return [
            alert
            for alert in self.alerts
            if alert.get("labels", {}).get("alertname") == name and status in (None, alert.get("status"))
        ]


class WebhookReceiver:
    """An HTTP server on ``host:port`` (``port=0``: a free one) that answers 200 to every POST and keeps its JSON
    body as a :class:`Notification`; usable as a context manager (stopped on exit)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, path: str = "/alerts") -> None:
        """Start listening at once, on a daemon thread."""
        received: list[Notification] = []
        condition = threading.Condition()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self.send_response(400)
                    self.end_headers()
                    return
                with condition:
                    received.append(Notification(received_at=time.time(), body=body))
                    condition.notify_all()
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._received = received
        self._condition = condition
        self._server = ThreadingHTTPServer((host, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook-receiver", daemon=True)
        self._thread.start()
        self.url = f"http://{host}:{self._server.server_address[1]}{path}"
        """What Alertmanager's ``webhook_configs`` ``url`` must be."""

    def notifications(self) -> list[Notification]:
        """Every notification so far, in arrival order."""
        with self._condition:
            return list(self._received)

    def wait_for(self, matches: Callable[[Notification], bool], *, timeout_s: float) -> Notification | None:
        """The first notification (already here or arriving within ``timeout_s`` seconds) for which ``matches`` is
        true, or ``None`` after the timeout."""
        deadline = time.monotonic() + timeout_s
        with self._condition:
            while True:
                found = next((n for n in self._received if matches(n)), None)
                remaining = deadline - time.monotonic()
                if found is not None or remaining <= 0:
                    return found
                self._condition.wait(remaining)

    def close(self) -> None:
        """Stop the server and free its port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> WebhookReceiver:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def format_notification(notification: Notification) -> str:
    """A notification as a terminal shows it: the group's status and run, then per alert its summary, description
    and links."""
    group = notification.body.get("groupLabels") or {}
    lines = [f"[{notification.status.upper()}] {', '.join(f'{k}={v}' for k, v in group.items()) or 'no group'}"]
    for alert in notification.alerts:
        annotations = alert.get("annotations") or {}
        name = alert.get("labels", {}).get("alertname", "?")
        lines.append(f"  {alert.get('status', '?')} {name}: {annotations.get('summary', '')}")
        for key in ("description", "runbook_url", "dashboard_url"):
            if annotations.get(key):
                lines.append(f"    {key}: {annotations[key]}")
    return "\n".join(lines)
