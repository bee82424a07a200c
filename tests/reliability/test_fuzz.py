"""Every public entry point, fuzzed with what users and hostile callers pass (issue 18): arbitrary Python objects,
tensors of every dtype, shape and layout (sparse, non-contiguous, transposed, 0-dim, empty), numpy arrays and
scalars, nested containers, huge ints, NaN/inf, strings with control characters, objects whose ``repr`` or
``item()`` raise.

Invariants, checked on what the file exporter wrote (the real export path, read back):
- nothing raises, after construction;
- for the value calls, values recorded plus values rejected equals values offered, exactly;
- every exported sample record carries its identity attributes;
- the next export still succeeds, and what the process holds still encodes as OTLP.

``OTEL_RL_FUZZ_EXAMPLES`` sets the examples per test (100 by default; the long run in the issue note used more).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import uuid
import warnings
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

import otel_rl
from otel_rl._record.rollouts import Rollouts
from otel_rl.torchforge import Reduce, record_episode_sample, record_metric
from otel_rl.tracking import MetricsDictLogger

FUZZ = settings(
    max_examples=int(os.environ.get("OTEL_RL_FUZZ_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

# -- what callers pass ---------------------------------------------------------------------------------------------


class _Hostile:
    """An object whose repr, str, float, item, __array__ and __len__ all raise."""

    def __repr__(self) -> str:
        raise RuntimeError("repr fails")

    __str__ = __repr__

    def __float__(self) -> float:
        raise RuntimeError("float fails")

    def item(self) -> float:
        raise RuntimeError("item fails")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("array fails")


class _HasItem:
    """Something that only has ``.item()`` (a scalar of another array library)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value


texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["\x00\x1b[2J", "\ud800", "é" * 50]
)
huge_ints = st.integers(min_value=-(2**80), max_value=2**80) | st.sampled_from(
    [2**63, 2**63 - 1, -(2**63) - 1, 10**400]
)
floats = st.floats(allow_nan=True, allow_infinity=True)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    huge_ints,
    floats,
    texts,
    st.binary(max_size=8),
    st.complex_numbers(allow_nan=True),
    st.builds(Fraction, st.integers(-9, 9), st.integers(1, 9)),
    st.sampled_from(
        [np.float64(0.1), np.float32(-2.5), np.int64(-3), np.uint64(2**64 - 1), np.bool_(True), np.float16(1.5)]
    ),
    st.builds(_HasItem, floats),
    st.builds(_Hostile),
    st.just(object()),
)

_DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
]
_DTYPES += [getattr(torch, name) for name in ("uint16", "uint32", "uint64", "float8_e4m3fn") if hasattr(torch, name)]


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    """A tensor of any dtype, 0 to 3 dimensions (empty ones too), with NaN/inf/negative/huge values, in any layout:
    strided, transposed, sliced with a step, sparse, requiring grad."""
    shape = draw(st.lists(st.integers(0, 4), max_size=3))
    dtype = draw(st.sampled_from(_DTYPES))
    values = torch.randn(shape, dtype=torch.float64) * draw(st.sampled_from([1.0, 100.0, 1e30]))
    if values.numel() and draw(st.booleans()):
        values.view(-1)[0] = draw(st.sampled_from([math.nan, math.inf, -math.inf, -5.0, 2.0**70]))
    tensor = values.to(dtype) if dtype != torch.bool else values > 0
    layout = draw(st.sampled_from(["strided", "transposed", "stepped", "sparse", "grad"]))
    if layout == "transposed" and tensor.dim() >= 2:
        tensor = tensor.transpose(0, 1)
    elif layout == "stepped" and tensor.dim() >= 1:
        tensor = tensor[::2]
    elif layout == "sparse" and tensor.dim() >= 1 and dtype in (torch.float32, torch.float64, torch.int64):
        tensor = tensor.to_sparse()
    elif layout == "grad" and dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        tensor = tensor.clone().requires_grad_(True)
    return tensor


def _as_numpy(tensor: torch.Tensor) -> Any:
    try:
        return tensor.detach().to_dense().numpy()
    except (TypeError, RuntimeError):
        return tensor


arrays = tensors().map(_as_numpy)
containers = st.recursive(
    scalars | tensors(),
    lambda children: (
        st.lists(children, max_size=4) | st.tuples(children, children) | st.dictionaries(texts, children, max_size=3)
    ),
    max_leaves=8,
)
inputs = st.one_of(
    scalars,
    tensors(),
    arrays,
    st.lists(scalars, max_size=8),
    st.lists(st.lists(floats, max_size=3), max_size=3),
    containers,
)
names = st.one_of(texts, st.text(max_size=300), st.none(), huge_ints, st.builds(_Hostile), st.just("x" * 10_000))


# -- the process under test, and reading back what it exported ----------------------------------------------------


@pytest.fixture
def telemetry(tmp_path: Path) -> Iterator[otel_rl.Telemetry]:
    instance = otel_rl.Telemetry(
        otel_rl.TelemetryConfig(
            run_id="fuzz",
            exporter="file",
            output_dir=str(tmp_path / "out"),
            export_interval_s=60,
            top_k=2,
            bottom_k=2,
            random_k=1,
            sample_text_budget_bytes=256,
        )
    )
    yield instance
    assert instance.shutdown(10)
    assert _exports(instance)[-1].get(("rl.run.finished", ())) == 1


_READ: dict[str, list[dict[tuple[str, tuple[tuple[str, Any], ...]], float]]] = {}
"""Per output folder: the last metrics exports read so far (the files only grow)."""


def _new_lines(telemetry: otel_rl.Telemetry, signal: str) -> list[Any]:
    """The OTLP messages of ``signal`` written since the last call (the offline files: otel_rl_contract.files)."""
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.logs.v1.logs_pb2 import LogsData
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
    from otel_rl_contract.files import ids_from_hex

    kind = MetricsData if signal == "metrics" else LogsData
    messages = []
    for path in sorted(Path(telemetry.config.resolved.output_dir).glob(f"*_{signal}_*.jsonl")):
        offset = _OFFSETS.get(str(path), 0)
        with open(path, "rb") as out:
            out.seek(offset)
            chunk = out.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        _OFFSETS[str(path)] = offset + len(complete)
        messages += [
            ParseDict(ids_from_hex(json.loads(line)), kind()) for line in complete.decode("utf-8").splitlines()
        ]
    return messages


_OFFSETS: dict[str, int] = {}
"""Per offline file: how far it was read."""


def _value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as Python (a map as a dict)."""
    kind = value.WhichOneof("value")
    if kind == "kvlist_value":
        return {item.key: _value(item.value) for item in value.kvlist_value.values}
    return None if kind is None else getattr(value, kind)


def _exports(telemetry: otel_rl.Telemetry) -> list[dict[tuple[str, tuple[tuple[str, Any], ...]], float]]:
    """The last two metrics exports the files hold: (metric, attributes) -> the point's value (histograms: count)."""
    key = telemetry.config.resolved.output_dir
    exports = _READ.get(key, [])
    for message in _new_lines(telemetry, "metrics"):
        points: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}
        for rm in message.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    data = getattr(metric, metric.WhichOneof("data"))
                    for point in data.data_points:
                        attributes = tuple(sorted((item.key, _value(item.value)) for item in point.attributes))
                        value = point.count if hasattr(point, "count") else getattr(point, point.WhichOneof("value"))
                        points[(metric.name, attributes)] = value
        exports.append(points)
    _READ[key] = exports[-2:]
    return exports[-2:]


def _records(telemetry: otel_rl.Telemetry) -> list[dict[str, Any]]:
    """The sample records written since the last call: attributes, the resource's attributes and the body."""
    return [
        {
            "attributes": {item.key: _value(item.value) for item in record.attributes},
            "resource": {"attributes": {item.key: _value(item.value) for item in rl.resource.attributes}},
            "body": _value(record.body),
        }
        for message in _new_lines(telemetry, "logs")
        for rl in message.resource_logs
        for sl in rl.scope_logs
        for record in sl.log_records
    ]


def _tally(telemetry: otel_rl.Telemetry, metric: str) -> tuple[float, float]:
    """Values of ``metric`` recorded and rejected (name rejections are names, not values), as last exported."""
    assert telemetry.flush(10), "the export after the calls must succeed"
    latest = _exports(telemetry)[-1]
    recorded = latest.get((contract.VALUES_RECORDED.name, ((contract.SELF_METRIC, metric),)), 0)
    rejected = sum(
        value
        for (name, attrs), value in latest.items()
        if name == contract.VALUES_REJECTED.name
        and dict(attrs)[contract.SELF_METRIC] == metric
        and not dict(attrs)[contract.SELF_REASON].startswith("name_")
    )
    return recorded, rejected


def _encodes(telemetry: otel_rl.Telemetry) -> None:
    data, window = telemetry._pipeline.store.collect(telemetry._pipeline.store._start_time_ns + 1)
    telemetry._pipeline.store.restore(window)
    if data is not None:
        encode_metrics(data)


def offered(values: Any) -> int:
    """How many values a call offers, by the documented rule (docs/contract.md): a tensor's or array's elements,
    a list's items (a nested list's items of items), else one."""
    if isinstance(values, torch.Tensor):
        return int(values.numel())
    if isinstance(values, np.ndarray):
        return int(values.size)
    if isinstance(values, (list, tuple)):
        return sum(len(item) if isinstance(item, (list, tuple)) else 1 for item in values)
    return 1


def _quiet() -> Any:
    catcher = warnings.catch_warnings()
    catcher.__enter__()
    warnings.simplefilter("ignore")
    return catcher


# -- the invariants --------------------------------------------------------------------------------------------------


@FUZZ
@given(values=inputs, key=names)
def test_record_metric_counts_every_value_offered(telemetry: otel_rl.Telemetry, values: Any, key: Any) -> None:
    """record_metric takes any value of any shape: recorded + rejected == offered, and the export still encodes."""
    before = sum(_tally(telemetry, "rl.metric"))
    telemetry.record_metric(key, values)
    assert sum(_tally(telemetry, "rl.metric")) - before == offered(values)
    _encodes(telemetry)


@FUZZ
@given(
    values=st.one_of(scalars, tensors().filter(lambda t: t.dim() <= 1), st.lists(scalars, max_size=8)),
    fn=names,
    dataset=names,
)
def test_record_rewards_counts_every_value_offered(
    telemetry: otel_rl.Telemetry, values: Any, fn: Any, dataset: Any
) -> None:
    """record_rewards with one reward per rollout: recorded + rejected == offered, whatever the names."""
    before = sum(_tally(telemetry, "rl.reward"))
    telemetry.record_rewards(values, fn=fn, dataset=dataset)
    assert sum(_tally(telemetry, "rl.reward")) - before == offered(values)
    _encodes(telemetry)


@FUZZ
@given(data=st.data())
def test_masked_tensors_count_what_the_mask_selects(telemetry: otel_rl.Telemetry, data: st.DataObject) -> None:
    """With a mask of the values' shape, the values offered are the selected ones."""
    shape = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=1))
    values = torch.randn(shape) * data.draw(st.sampled_from([1.0, math.inf]))
    mask = torch.from_numpy(
        np.array(data.draw(st.lists(st.booleans(), min_size=shape[0], max_size=shape[0])), dtype=bool)
    )
    before = sum(_tally(telemetry, "rl.metric"))
    telemetry.record_metric("masked", values, mask=mask)
    assert sum(_tally(telemetry, "rl.metric")) - before == int(mask.sum())


@FUZZ
@given(versions=inputs, current=st.one_of(st.integers(0, 2**62), scalars))
def test_record_staleness_accounts_for_every_token(telemetry: otel_rl.Telemetry, versions: Any, current: Any) -> None:
    """Every token offered to record_staleness is recorded, rejected or counted unversioned (with a usable current
    version; an unusable one rejects them all)."""
    unversioned = contract.UNVERSIONED.name

    def state() -> float:
        recorded, rejected = _tally(telemetry, "rl.staleness")
        latest = _exports(telemetry)[-1]
        return recorded + rejected + sum(v for (name, _), v in latest.items() if name == unversioned)

    before = state()
    telemetry.record_staleness(versions, current)
    assert state() - before == offered(versions)
    _encodes(telemetry)


def _groups_rejected(telemetry: otel_rl.Telemetry) -> float:
    assert telemetry.flush(10)
    latest = _exports(telemetry)[-1]
    return float(
        sum(
            value
            for (name, attrs), value in latest.items()
            if name == contract.VALUES_REJECTED.name and dict(attrs)[contract.SELF_METRIC] == contract.GROUPS.name
        )
    )


def _grouped(telemetry: otel_rl.Telemetry, group_ids: Any, rewards: Any, mask: Any) -> int | None:
    """Rollouts that take part in group outcomes for these arguments (None when the call is rejected whole)."""
    result = telemetry._pipeline.summarizers.rollouts.summarize(
        Rollouts(group_ids=group_ids, rewards=rewards, mask=mask)
    )
    return None if result.rejected else result.grouped


@FUZZ
@given(
    data=st.data(),
    rows=st.integers(0, 8),
)
def test_every_rollout_offered_to_groups_is_grouped_or_counted(
    telemetry: otel_rl.Telemetry, data: st.DataObject, rows: int
) -> None:
    """group_ids and rewards of any content (lists of any scalars, tensors and arrays of any dtype, bools), with
    or without a row mask: each rollout offered takes part in an exact group outcome or is counted under
    rl.groups, and a call rejected whole counts every id."""
    one_per_rollout = st.one_of(
        st.lists(scalars, min_size=rows, max_size=rows),
        tensors().filter(lambda t: t.dim() == 1 and t.shape[0] == rows),
        st.just(torch.randint(-2, 3, (rows,))),
        st.just(np.random.default_rng(rows).integers(0, 3, rows).astype(np.uint64) + np.uint64(2**63 - 2)),
        st.just(torch.rand(rows) > 0.5),
    )
    group_ids, rewards = data.draw(one_per_rollout), data.draw(one_per_rollout)
    mask = data.draw(st.none() | st.just(torch.arange(rows) % 2 == 0))
    before = _groups_rejected(telemetry)
    quiet = _quiet()
    try:
        telemetry.record_rollouts(group_ids=group_ids, rewards=rewards, mask=mask)
        grouped = _grouped(telemetry, group_ids, rewards, mask)
    finally:
        quiet.__exit__(None, None, None)
    rejected = _groups_rejected(telemetry) - before
    if grouped is None:
        assert rejected == offered(group_ids)
    else:
        assert grouped + rejected == (rows if mask is None else int(mask.sum()))
    _encodes(telemetry)


@FUZZ
@given(values=st.one_of(tensors().filter(lambda t: t.dtype == torch.bool), st.lists(st.booleans(), max_size=8)))
def test_bools_are_recorded_as_ones_and_zeros(telemetry: otel_rl.Telemetry, values: Any) -> None:
    """Bool tensors of any shape and layout, and lists of bools, are recorded whole by record_metric (nothing
    rejected): the histogram's count grows by every element."""
    recorded, rejected = _tally(telemetry, "rl.metric")
    telemetry.record_metric("flags", values)
    after_recorded, after_rejected = _tally(telemetry, "rl.metric")
    assert (after_recorded - recorded, after_rejected - rejected) == (offered(values), 0)


@FUZZ
@given(
    calls=st.lists(
        st.tuples(
            st.sampled_from(["rollouts", "drops", "phase", "version", "step", "flush", "sample"]), inputs, inputs, names
        ),
        min_size=1,
        max_size=5,
    )
)
def test_no_entry_point_raises_and_exports_keep_going(
    telemetry: otel_rl.Telemetry, calls: list[tuple[str, Any, Any, Any]]
) -> None:
    """Any sequence of the other Telemetry methods with any arguments returns normally, and the next export
    succeeds and encodes."""
    quiet = _quiet()
    try:
        for call, first, second, name in calls:
            if call == "rollouts":
                telemetry.record_rollouts(
                    mask=second,
                    advantages=first,
                    response_lengths=first,
                    entropy=second,
                    logprobs=first,
                    inference_logprobs=second,
                    rewards=first,
                    group_ids=second,
                    reward_breakdown=second if name is None else {name: second},
                )
            elif call == "drops":
                telemetry.record_staleness_drops(first, response_lengths=second, staleness=first, dataset=name)
            elif call == "phase":
                telemetry.set_phase(name)
            elif call == "version":
                telemetry.set_policy_version(first)
            elif call == "step":
                telemetry.step(first)
            elif call == "flush":
                telemetry.flush(first if not isinstance(first, (int, float)) or isinstance(first, bool) else 0.01)
            else:
                telemetry.record_sample(first, table=name)
    finally:
        quiet.__exit__(None, None, None)
    assert telemetry.flush(10)
    _encodes(telemetry)


sample_fields = st.fixed_dictionaries(
    {"reward": st.one_of(floats, huge_ints, scalars, tensors())},
    optional={
        "episode_id": scalars,
        "policy_version": scalars,
        "prompt": st.one_of(texts, st.binary(max_size=20), scalars),
        "response": st.one_of(texts, st.just("z" * 100_000), scalars),
        "target": scalars,
        "reward_breakdown": st.one_of(
            st.dictionaries(names.filter(lambda n: isinstance(n, str)), scalars, max_size=4), scalars, inputs
        ),
        "advantage": scalars,
        "staleness": scalars,
        "request_len": scalars,
        "response_len": scalars,
        "dataset": names,
        "extra": st.one_of(st.dictionaries(texts, containers, max_size=4), scalars, inputs),
        "unknown": scalars,
    },
)


@FUZZ
@given(
    batch=st.lists(st.one_of(sample_fields, sample_fields.map(lambda f: _episode(f)), inputs), min_size=1, max_size=6),
    step=st.integers(0, 2**40),
    table=names,
)
def test_every_exported_sample_keeps_its_identity(
    telemetry: otel_rl.Telemetry, batch: list[Any], step: int, table: Any
) -> None:
    """Samples of any shape (EpisodeSample or dict, any field values, not samples at all): never raises, and every
    record that goes out carries id, step, selection, table and a numeric reward, with texts within the budget."""
    quiet = _quiet()
    try:
        telemetry.step(step)
        for sample in batch:
            telemetry.record_sample(sample, table=table)
        telemetry.step(step + 1)
    finally:
        quiet.__exit__(None, None, None)
    assert telemetry.flush(10)
    for record in _records(telemetry):
        attributes = record["attributes"]
        assert len(attributes[contract.SAMPLE_ID]) == 32
        assert attributes[contract.SAMPLE_SELECTION] in ("top", "bottom", "random")
        assert isinstance(attributes[contract.SAMPLE_TABLE], str) and isinstance(attributes[contract.SAMPLE_STEP], int)
        assert isinstance(attributes[contract.SAMPLE_REWARD], (int, float))
        assert record["resource"]["attributes"][contract.RUN_ID] == "fuzz"
        for value in record["body"].values():
            assert len(value.encode("utf-8", errors="replace")) <= 256


def _episode(fields: dict[str, Any]) -> Any:
    known = {key: value for key, value in fields.items() if key != "unknown"}
    return otel_rl.EpisodeSample(**known)


@FUZZ
@given(
    calls=st.lists(
        st.tuples(st.one_of(texts, names), containers, st.sampled_from([*Reduce, "mean", None, 3])),
        min_size=1,
        max_size=6,
    )
)
def test_the_torchforge_shim_never_raises(telemetry: otel_rl.Telemetry, calls: list[tuple[Any, Any, Any]]) -> None:
    """torchforge's functions with any key, value and reduction (samples included) return normally."""
    otel_rl._global._current = telemetry
    quiet = _quiet()
    try:
        for key, value, reduction in calls:
            record_metric(key, value, reduction)
            record_episode_sample(key, value)
    finally:
        quiet.__exit__(None, None, None)
        otel_rl._global._current = None
    assert telemetry.flush(10)
    _encodes(telemetry)


@FUZZ
@given(
    data=st.one_of(
        st.dictionaries(st.one_of(texts, huge_ints, st.builds(_Hostile)), containers, max_size=8), containers
    ),
    step=st.one_of(st.none(), huge_ints, scalars),
)
def test_metrics_dicts_never_raise(telemetry: otel_rl.Telemetry, data: Any, step: Any) -> None:
    """MetricsDictLogger.log with any dict (hostile keys, any values) and any step returns normally."""
    quiet = _quiet()
    try:
        logger = MetricsDictLogger(telemetry)
        logger.log(data, step=step)
        logger.finish()
    finally:
        quiet.__exit__(None, None, None)
    assert telemetry.flush(10)
    _encodes(telemetry)


@FUZZ
@given(
    logs=st.one_of(st.dictionaries(st.one_of(texts, st.builds(_Hostile)), scalars, max_size=8), scalars),
    global_step=st.one_of(huge_ints, scalars),
)
def test_trl_callback_hooks_never_raise(telemetry: otel_rl.Telemetry, logs: Any, global_step: Any) -> None:
    """The TRL callback's hooks with any logs and a state whose step is anything return normally."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from otel_rl.trl import OtelRLCallback

    callback = OtelRLCallback(telemetry=telemetry)
    state = TrainerState()
    state.global_step = global_step
    args = TrainingArguments(output_dir="unused", use_cpu=True, report_to=[])
    quiet = _quiet()
    try:
        for hook in (callback.on_train_begin, callback.on_step_begin, callback.on_substep_end, callback.on_step_end):
            hook(args, state, TrainerControl())
        callback.on_log(args, state, TrainerControl(), logs=logs)
    finally:
        quiet.__exit__(None, None, None)
    assert telemetry.flush(10)
    _encodes(telemetry)


@FUZZ
@given(timeout=st.one_of(scalars, st.floats(-5, 0.5)))
def test_module_functions_never_raise_after_setup(tmp_path: Path, timeout: Any) -> None:
    """otel_rl.setup, get_telemetry and reset with any timeout: reset returns, and unless it was given less than the
    default five seconds to export in (then the export may be cut), the final export marks the run finished."""
    output = tmp_path / f"module-{uuid.uuid4().hex}"
    telemetry = otel_rl.setup(
        otel_rl.TelemetryConfig(run_id="module", exporter="file", output_dir=str(output), export_interval_s=60)
    )
    assert otel_rl.get_telemetry() is telemetry
    telemetry.record_rewards([1.0])
    quiet = _quiet()
    try:
        otel_rl.reset(timeout)
    finally:
        quiet.__exit__(None, None, None)
    if not 0 <= _seconds(timeout) < 5:  # an unusable timeout means the default (5 s), which is enough
        assert _exports(telemetry)[-1][("rl.run.finished", ())] == 1


def _seconds(timeout: Any) -> float:
    """The timeout otel-rl takes from ``timeout`` (the documented conversion), or -1 when it takes the default."""
    from otel_rl._record.inputs import BadInput, as_real

    try:
        value = as_real(timeout, argument="timeout_s")
    except BadInput:
        return -1.0
    return value if value >= 0 else -1.0


def test_huge_inputs_and_hundreds_of_reward_fns(telemetry: otel_rl.Telemetry) -> None:
    """A 4M-value tensor, a 16 MB response and 500 reward-fn names: no raise, the cap folds names into _overflow,
    every value is counted once."""
    telemetry.record_rewards(torch.zeros(4_000_000))
    telemetry.record_sample(otel_rl.EpisodeSample(reward=1.0, response="x" * 16_000_000))
    for index in range(500):
        telemetry.record_rewards([1.0, -1.0], fn=f"fn_{index}")
    assert telemetry.flush(10)
    latest = _exports(telemetry)[-1]
    counts = {
        dict(attrs).get(contract.REWARD_FN): count
        for (name, attrs), count in latest.items()
        if name == contract.REWARDS.histogram.name
    }
    cap = telemetry.config.resolved.max_reward_fns
    assert counts["total"] == 4_000_000
    assert len(counts) == cap + 1  # 32 names ("total" is one of them), then _overflow
    assert counts[contract.OVERFLOW] == 2 * (500 - (cap - 1))


_SETTINGS = [f.name for f in dataclasses.fields(otel_rl.TelemetryConfig) if f.init]


@FUZZ
@given(
    overrides=st.dictionaries(
        st.sampled_from([*_SETTINGS, "unknown_setting"]),
        st.one_of(
            scalars,
            st.lists(scalars, max_size=3),
            st.tuples(st.floats(), st.floats()),
            st.just(()),
            st.dictionaries(texts, scalars, max_size=2),
            st.just(print),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_configuration_errors_name_the_setting(overrides: dict[str, Any]) -> None:
    """TelemetryConfig with arbitrary values either builds or raises ValueError/TypeError naming one of the
    settings given (never another exception type)."""
    settings_ = {"run_id": "cfg", "rank": 0, "world_size": 1, "exporter": "none", **overrides}
    try:
        otel_rl.TelemetryConfig(**settings_)
    except (ValueError, TypeError) as error:
        message = str(error)
        assert any(name in message for name in settings_), message
