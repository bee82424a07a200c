"""The printed tables (rich when installed, plain text otherwise) and the JSON file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Table = tuple[str, list[str], list[list[str]]]


def _time(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


def _ratio(value: float) -> str:
    return f"{value:,.0f}x" if value >= 100 else f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def _ok(flag: bool) -> str:
    return "yes" if flag else "NO"


def _quartiles(entry: dict[str, float], render: Any, key: str = "") -> str:
    """``median [p25-p75]`` of a spread."""
    suffix = f"_{key}" if key else ""
    return f"{render(entry[f'median{suffix}'])} [{render(entry[f'p25{suffix}'])}-{render(entry[f'p75{suffix}'])}]"


def _hotpath_tables(hot: dict[str, Any]) -> list[Table]:
    """The hot path against the bandwidth floor, cold and warm, per tree; the thread threshold."""
    out: list[Table] = []
    trees = [name for name in ("baseline", "current") if name in hot]
    load = hot["load_average_1min"]
    for tree in trees:
        summary = hot[tree]
        bandwidth = summary["read_bandwidth_gb_s"]
        rows = []
        for name in summary["workloads"]:
            entry = summary[name]
            row = [name, f"{entry['bytes'] / 1e6:.1f} MB", _time(entry["floor_ns"]["median"])]
            for mode in ("cold", "warm"):
                found = entry[mode]
                limit = hot["targets"].get(name, {}).get(mode)
                met = "" if limit is None else f" (<= {limit:g}x: {_ok(found['x_floor']['median'] <= limit)})"
                row += [_quartiles(found, _time, "ns"), _quartiles(found["x_floor"], _ratio) + met]
            cold_sum, warm_sum = (entry[mode]["x_sum_reference"]["median"] for mode in ("cold", "warm"))
            row.append(f"{_ratio(cold_sum)} / {_ratio(warm_sum)}")
            rows.append(row)
        out.append(
            (
                f"0. Hot path, {tree} ({hot['trees'][tree]['otel_rl']}): {hot['rounds']} rounds, read bandwidth "
                f"{bandwidth['median']:.1f} GB/s [{bandwidth['p25']:.1f}-{bandwidth['p75']:.1f}], load "
                f"{load['min']}-{load['max']}",
                ["workload", "bytes", "floor", "cold", "cold x floor", "warm", "warm x floor", "x x.sum() (ref)"],
                rows,
            )
        )
    if "speedup" in hot:
        rows = [[name, _ratio(modes["cold"]), _ratio(modes["warm"])] for name, modes in hot["speedup"].items()]
        out.append(("0. Hot path: baseline / current (medians, same run)", ["workload", "cold", "warm"], rows))
    threads = hot.get("threads")
    if threads:
        rows = [
            [
                f"{row['values']:,}",
                _quartiles(row["one_thread"], _time, "ns"),
                _quartiles(row["two_threads"], _time, "ns"),
                _ratio(row["speedup"]),
            ]
            for row in threads
        ]
        out.append(
            ("0. One distribution's kernel: one thread or two", ["values", "1 thread", "2 threads", "1 / 2"], rows)
        )
    parts = hot.get("breakdown")
    if parts:
        rows = [
            [name, _quartiles(entry, _time, "ns"), f"{entry['ns_per_value']:.2f}" if "ns_per_value" in entry else ""]
            for name, entry in parts.items()
        ]
        out.append(("0. Where a warm call's time goes (one thread)", ["part", "median [p25-p75]", "ns/value"], rows))
    return out


def tables(results: dict[str, Any]) -> list[Table]:
    """The report as (title, header, rows) tables."""
    out: list[Table] = []
    hot = results.get("hotpath")
    if hot:
        out += _hotpath_tables(hot)
    ingest = results.get("ingest")
    if ingest:
        rows = [
            [name, _time(op["median_ns"]), _ratio(op["x_floor"]), op.get("note", "")]
            for name, op in ingest["operations"].items()
        ]
        out.append(
            (
                f"1. Ingest of {ingest['tokens']:,} tokens {tuple(ingest['shape'])}",
                ["operation", "median", "x floor", "note"],
                rows,
            )
        )
        r, t, met = ingest["ratios"], ingest["targets"], ingest["targets_met"]
        out.append(
            (
                "1. Ratios (step = record_rewards + record_staleness, per-token 2-D with mask)",
                ["ratio", "value", "target", "met"],
                [
                    [
                        "step / floor",
                        _ratio(r["step_vs_floor"]),
                        f"<= {t['step_vs_floor_max']:.0f}x",
                        _ok(met["step_vs_floor"]),
                    ],
                    [
                        "OTel SDK loop / step",
                        _ratio(r["otel_sdk_speedup"]),
                        f">= {t['otel_sdk_speedup_min']:,.0f}x",
                        _ok(met["otel_sdk_speedup"]),
                    ],
                    [
                        "TensorBoard / step",
                        _ratio(r["tensorboard_speedup"]),
                        f">= {t['tensorboard_speedup_min']:.0f}x",
                        _ok(met["tensorboard_speedup"]),
                    ],
                    ["prometheus loop / step", _ratio(r["prometheus_speedup"]), "", ""],
                    ["np.histogram / step", _ratio(r["numpy_histogram_speedup"]), "", ""],
                    ["torch.histc / step", _ratio(r["torch_histc_speedup"]), "", ""],
                    [
                        f"step / bandwidth floor ({ingest['step_bytes'] / 1e6:.1f} MB "
                        f"at {ingest['read_bandwidth_gb_s']:.1f} GB/s)",
                        _ratio(r["step_vs_bandwidth_floor"]),
                        "",
                        "",
                    ],
                    ["step exponential / explicit", _ratio(r["step_exponential_vs_explicit"]), "", ""],
                    [
                        "rewards_1d / floor",
                        _ratio(r["rewards_1d_vs_floor"]),
                        f"<= {t['rewards_1d_vs_floor_max']:.0f}x",
                        _ok(met["rewards_1d_vs_floor"]),
                    ],
                    ["rewards_1d exponential / explicit", _ratio(r["rewards_1d_exponential_vs_explicit"]), "", ""],
                    [
                        "record_rollouts (all fields) / floor",
                        _ratio(r["rollouts_vs_floor"]),
                        f"<= {t['rollouts_vs_floor_max']:.0f}x",
                        _ok(met["rollouts_vs_floor"]),
                    ],
                    ["OTel SDK loop / rewards_1d", _ratio(r["otel_sdk_speedup_1d"]), "", ""],
                    [
                        "TensorBoard / rewards_1d",
                        _ratio(r["tensorboard_speedup_1d"]),
                        f">= {t['tensorboard_speedup_1d_min']:.0f}x",
                        _ok(met["tensorboard_speedup_1d"]),
                    ],
                ],
            )
        )
    growth = results.get("growth")
    if growth:
        out.append(
            (
                "2. Growth (same step at several sizes)",
                ["tokens", "step", "ns/token", "floor", "x floor"],
                [
                    [
                        f"{g['tokens']:,}",
                        _time(g["step_ns"]),
                        f"{g['per_token_ns']:.2f}",
                        _time(g["floor_ns"]),
                        _ratio(g["x_floor"]),
                    ]
                    for g in growth
                ],
            )
        )
    thread = results.get("training_thread")
    if thread:
        modes = thread["modes"]
        rows = []
        for mode, data in modes.items():
            rss = data["rss_kb_start_max_end"]
            p99_ratio = thread["ratios"].get(f"{mode}_p99_vs_healthy")
            rows.append(
                [
                    mode,
                    str(data["steps"]),
                    _time(data["median_ns"]),
                    _time(data["p99_ns"]),
                    "1.00x" if p99_ratio is None else _ratio(p99_ratio),
                    "" if p99_ratio is None else _ok(thread["targets_met"][f"{mode}_p99"]),
                    " / ".join(f"{b[0] // 1024}-{b[1] // 1024}-{b[2] // 1024}" for b in rss),
                ]
            )
        out.append(
            (
                f"3. Training-thread cost of a typical step "
                f"({thread['rollouts']} rollouts, {thread['tokens']:,} tokens)",
                [
                    "mode",
                    "steps",
                    "median",
                    "p99",
                    "p99 / healthy",
                    f"<= {thread['target_p99_ratio_max']}x",
                    "RSS MiB start-max-end",
                ],
                rows,
            )
        )
    phases = results.get("phases")
    if phases:
        rows = [[arm, _time(data["median_ns"]), _time(data["p99_ns"])] for arm, data in phases["arms"].items()]
        rows.append(
            [
                "spans' cost",
                f"{phases['span_cost_per_step_us']:.0f} us/step",
                f"{phases['span_cost_per_span_us']:.1f} us/span",
            ]
        )
        counted = phases.get("phase_metrics")
        if counted:
            ended, alone = _time(counted["counted_median_ns"]), _time(counted["span_only_median_ns"])
            rows.append(
                [
                    "a phase's own metrics (rl.phase.calls, rl.phase.duration)",
                    f"{counted['cost_per_phase_us']:.1f} us/phase",
                    f"(ended {ended} vs span alone {alone})",
                ]
            )
        out.append(
            (
                f"3b. Phase spans on the training thread "
                f"({phases['spans_per_step']} spans a step, {phases['steps']:,} steps; "
                f"traced / untraced median {_ratio(phases['traced_vs_untraced_median'])})",
                ["arm", "median", "p99"],
                rows,
            )
        )
    memory = results.get("memory")
    if memory:
        out.append(
            (
                f"4. Memory over {memory['steps']:,} steps {tuple(memory['shape'])}",
                ["slope KB/1000 steps", "RSS first", "RSS last", "samples exported"],
                [
                    [
                        f"{memory['slope_kb_per_1000_steps']:.1f}",
                        f"{memory['rss_first_kb']:,} KB",
                        f"{memory['rss_last_kb']:,} KB",
                        f"{memory['sample_records_exported']:,}",
                    ]
                ],
            )
        )
    cuda = results.get("cuda")
    if cuda is not None:
        if cuda.get("available"):
            rows = [[n, str(cuda["syncs_per_call"][n]), _time(cuda["median_ns"][n])] for n in cuda["syncs_per_call"]]
            out.append((f"5. CUDA ({cuda['device']})", ["call", "syncs", "median"], rows))
        else:
            out.append(("5. CUDA", ["result"], [[cuda["skipped"]]]))
    collector = results.get("collector")
    if collector:
        rows = [
            [
                str(row["ranks"]),
                _ok(row["exact"]),
                f"{row['lag_after_last_export_s']:.2f} s",
                f"{row['achieved_export_interval_s']:.2f} s",
                f"{row['collector_cores']:.2f}",
                f"{row['collector_cpu_ms_per_rank_per_s']:.3f}",
                f"{row['collector_rss_mib']:.0f} MiB",
                f"{row['collector_rss_kib_per_rank']:.0f} KiB",
            ]
            for row in collector["rows"]
        ]
        out.append(
            (
                f"6. Collector-side scaling (export every {collector['export_interval_s']:g} s, aggregation interval "
                f"{collector['aggregation_interval']}): largest exact with lag < 2 s = "
                f"{collector['largest_exact_with_lag_under_2s']} ranks",
                [
                    "ranks",
                    "exact",
                    "lag after last export",
                    "export interval achieved",
                    "collector cores",
                    "CPU ms/rank/s",
                    "RSS",
                    "RSS/rank",
                ],
                rows,
            )
        )
    capacity = results.get("capacity")
    if capacity:
        series, store = capacity["series_per_run"], capacity["log_store"]
        rows = [
            [
                "series per run (all signals)",
                f"{series['series']} ({series['series_with_rank_label']} with a rank label)",
            ],
            ["sample records stored", f"{store['records_stored']} of {store['records_expected']}"],
            ["records per VictoriaLogs CPU-second", str(store["records_per_cpu_s"])],
            ["records/s achieved (shared cores)", str(store["records_per_s_achieved"])],
            ["disk per record", f"{store['disk_bytes_per_record']} B ({store['record_text_bytes']} B of text)"],
        ]
        out.append(("6b. Capacity inputs (docs/scale.md)", ["measure", "value"], rows))
    return out


def render_plain(table: Table) -> str:
    """A table as aligned plain text."""
    title, header, rows = table
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([title, line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def show(results: dict[str, Any]) -> None:
    """Print every table, with rich if it is installed."""
    try:
        from rich.console import Console
        from rich.table import Table as RichTable
    except ImportError:
        machine = results.get("machine", {})
        print(f"machine: {machine.get('nproc')} cores, {machine.get('cpu_model')}, torch {machine.get('torch')}")
        for table in tables(results):
            print()
            print(render_plain(table))
        return
    console = Console()
    for title, header, rows in tables(results):
        rich_table = RichTable(title=title)
        for name in header:
            rich_table.add_column(name)
        for row in rows:
            rich_table.add_row(*row)
        console.print(rich_table)


def write(results: dict[str, Any], path: Path) -> None:
    """Write the results as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n", encoding="utf-8")
