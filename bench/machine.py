"""The machine a run happened on: cores, CPU model, library versions."""

from __future__ import annotations

import os
import platform
from typing import Any

import torch


def cpu_model() -> str:
    """``model name`` from /proc/cpuinfo, else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    """A description of this machine and the versions in use."""
    import numpy
    from opentelemetry.sdk.version import __version__ as otel_version

    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "numpy": numpy.__version__,
        "opentelemetry_sdk": otel_version,
        "python": platform.python_version(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
