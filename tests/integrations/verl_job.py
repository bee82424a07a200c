"""A verl job's logging, for tests/integrations/test_verl.py; run by ``.venv-verl/bin/python`` (verl 0.9.1).

It computes verl's own step metrics (``compute_data_metrics``, ``compute_timing_metrics``,
``compute_throughout_metrics``, ``compute_variance_proxy_metrics``, ``reduce_metrics`` of actor and critic outputs,
``process_validation_metrics``) from ``DataProto`` batches with the fields verl's trainer fills, and logs them as
``RayPPOTrainer.fit`` does: through ``Tracking(default_backend=['console', 'otel_rl'])``, built where the logging
happens and left to be collected when it ends (``fit`` never calls ``finish``). It never imports otel-rl: the
``otel_rl`` backend must come from verl's plugin loader. What it logged goes to ``--out`` as JSON (stdout is the
console backend's). With ``--ray``, the logging runs in a Ray actor, as in verl's TaskRunner, whose environment is
``--runtime-env-vars`` passed as the job's ``runtime_env``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    compute_variance_proxy_metrics,
    process_validation_metrics,
)
from verl.utils.metric import reduce_metrics

BATCH = 8
PROMPT = 6
RESPONSE = 10
PHASES = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "update_weights")
"""verl's timed sections of a step (``marked_timer`` in ray_trainer.py), besides ``step`` and ``testing``."""
RAY_STARTS = 3
"""Ray waits a fixed 30 s for its node to start (``ray/_private/node.py``), which a loaded 2-core machine can miss."""


def batch(rng: torch.Generator) -> DataProto:
    """One step's batch: left-padded prompts, right-padded responses (one at the full length, so the clip ratio is
    not 0), an outcome score on the last response token, a KL-penalised reward, GRPO-style advantages, critic values,
    old log-probs and the sum of squared probabilities."""
    prompt_lengths = torch.randint(2, PROMPT + 1, (BATCH,), generator=rng)
    response_lengths = torch.randint(1, RESPONSE + 1, (BATCH,), generator=rng)
    response_lengths[0] = RESPONSE
    positions = torch.arange(PROMPT)
    prompt_mask = (positions >= PROMPT - prompt_lengths[:, None]).long()
    response_mask = (torch.arange(RESPONSE) < response_lengths[:, None]).long()
    scores = torch.randint(0, 2, (BATCH,), generator=rng).float()
    token_level_scores = torch.zeros(BATCH, RESPONSE)
    token_level_scores[torch.arange(BATCH), response_lengths - 1] = scores
    kl = torch.rand(BATCH, RESPONSE, generator=rng) * 0.02 * response_mask
    advantage = (scores - scores.mean()) / (scores.std() + 1e-6)
    tensors = {
        "prompts": torch.randint(0, 1000, (BATCH, PROMPT), generator=rng),
        "responses": torch.randint(0, 1000, (BATCH, RESPONSE), generator=rng),
        "attention_mask": torch.cat([prompt_mask, response_mask], dim=-1),
        "response_mask": response_mask,
        "token_level_scores": token_level_scores,
        "token_level_rewards": token_level_scores - kl,
        "advantages": advantage[:, None] * response_mask,
        "returns": advantage[:, None] * response_mask,
        "values": torch.randn(BATCH, RESPONSE, generator=rng) * response_mask,
        "old_log_probs": -torch.rand(BATCH, RESPONSE, generator=rng) * 2,
        "sum_pi_squared": torch.rand(BATCH, RESPONSE, generator=rng) * 0.5,
    }
    data = DataProto.from_dict(tensors=tensors)
    data.meta_info["global_token_num"] = torch.sum(data.batch["attention_mask"], dim=-1).tolist()
    return data


def validation(rng: np.random.Generator) -> dict[str, Any]:
    """verl's validation metrics of two data sources, 4 prompts each, 4 responses per prompt, keyed as
    ``RayPPOTrainer._val_metrics_update`` keys them (``val-core/<source>/<var>/<metric>`` and ``val-aux/...``)."""
    sources = ["gsm8k"] * 16 + ["math"] * 16
    uids = [f"{source}-{index // 4}" for index, source in enumerate(sources)]
    accuracy = rng.integers(0, 2, len(sources)).astype(float)
    infos = {
        "reward": (accuracy - rng.uniform(0, 0.2, len(sources))).tolist(),
        "acc": accuracy.tolist(),
        "pred": [str(answer) for answer in rng.integers(0, 3, len(sources))],
    }
    metrics = {}
    for source, variables in process_validation_metrics(sources, uids, infos).items():
        core = "acc" if "acc" in variables else "reward"
        for variable, values in variables.items():
            n_max = max(int(name.split("@")[-1].split("/")[0]) for name in values)
            for name, value in values.items():
                is_core = variable == core and name.startswith(("mean", "maj", "best")) and f"@{n_max}" in name
                metrics[f"{'val-core' if is_core else 'val-aux'}/{source}/{variable}/{name}"] = value
    return metrics


def step_metrics(step: int, steps: int, rng: torch.Generator, np_rng: np.random.Generator) -> dict[str, Any]:
    """The dict ``fit`` logs at ``step``: worker outputs reduced, then the trainer's own metrics of the batch."""
    timing = {name: float(np_rng.uniform(0.05, 2.0)) for name in PHASES}
    if step == steps:
        timing["testing"] = float(np_rng.uniform(0.5, 1.0))
    timing["step"] = sum(timing.values()) + 0.1
    actor = reduce_metrics(
        {
            "actor/pg_loss": np_rng.normal(0, 0.1, 4).tolist(),
            "actor/entropy": np_rng.uniform(0.3, 1.2, 4).tolist(),
            "actor/kl_loss": np_rng.uniform(0, 0.01, 4).tolist(),
            "actor/ppo_kl": np_rng.normal(0, 0.001, 4).tolist(),
            "actor/pg_clipfrac": np_rng.uniform(0, 0.1, 4).tolist(),
            "actor/grad_norm": np_rng.uniform(0.1, 2.0, 4).tolist(),
            "actor/lr": [1e-6],
        }
    )
    critic = reduce_metrics({"critic/vf_loss": np_rng.uniform(0, 1, 4).tolist(), "critic/grad_norm": [0.5, 0.7]})
    data = batch(rng)
    metrics: dict[str, Any] = {**critic, **actor}
    if step == steps:
        metrics.update(validation(np_rng))
    metrics.update({"training/global_step": step, "training/epoch": 0})
    metrics.update(compute_data_metrics(batch=data, use_critic=True))
    metrics.update(compute_timing_metrics(batch=data, timing_raw=timing))
    metrics.update(compute_throughout_metrics(batch=data, timing_raw=timing, n_gpus=1))
    metrics.update(compute_variance_proxy_metrics(batch=data, gradient_norm=metrics["actor/grad_norm"]))
    return metrics


def log_job(steps: int, seed: int) -> dict[str, Any]:
    """Log a job as ``fit`` does (validation before training at step 0, then ``steps`` steps, validation merged
    into the last); what was logged, as JSON-ready floats, and what the process knows of the plugin."""
    from verl.utils.tracking import Tracking

    rng = torch.Generator().manual_seed(seed)
    np_rng = np.random.default_rng(seed)
    tracking = Tracking(
        project_name="otel-rl-test", experiment_name="verl-plugin", default_backend=["console", "otel_rl"]
    )
    logged = [validation(np_rng)]
    tracking.log(data=logged[0], step=0)
    for step in range(1, steps + 1):
        logged.append(step_metrics(step, steps, rng, np_rng))
        tracking.log(data=logged[-1], step=step)
    del tracking  # as when `fit` returns: collected, so finished (Tracking.__del__)
    import otel_rl

    return {
        "logged": [{key: float(value) for key, value in data.items()} for data in logged],
        "run_id": otel_rl.get_telemetry().config.resolved.run_id,
    }


def in_ray(steps: int, seed: int, env_vars: dict[str, str]) -> dict[str, Any]:
    """``log_job`` in a Ray actor of a local CPU-only cluster, its environment given only by ``runtime_env``; the
    run id the driver expects from its Ray context (the job's session and id) comes back beside it."""
    import ray

    for attempt in range(1, RAY_STARTS + 1):
        try:
            ray.init(num_cpus=1, include_dashboard=False, runtime_env={"env_vars": env_vars})
            break
        except Exception as error:
            if "timed out during startup" not in str(error) or attempt == RAY_STARTS:
                raise
            print(f"Ray start {attempt} of {RAY_STARTS} timed out; starting again", file=sys.stderr)
            ray.shutdown()
    try:
        context = ray.get_runtime_context()
        expected = f"ray-{context.get_session_name().removeprefix('session_')}-{context.get_job_id()}"
        runner = ray.remote(num_cpus=1)(TaskRunner).remote()
        result: dict[str, Any] = ray.get(runner.run.remote(steps, seed))
    finally:
        ray.shutdown()
    return {**result, "expected_run_id": expected}


class TaskRunner:
    """verl's TaskRunner, reduced to its logging."""

    def run(self, steps: int, seed: int) -> dict[str, Any]:
        return log_job(steps, seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ray", action="store_true")
    parser.add_argument("--runtime-env-vars", default="{}", help="JSON object: the Ray job's runtime_env env_vars")
    args = parser.parse_args()
    loaded = "otel_rl.verl_plugin" in sys.modules  # after `import verl` above, before anything here imports otel-rl
    if args.ray:
        result = in_ray(args.steps, args.seed, json.loads(args.runtime_env_vars))
    else:
        result = log_job(args.steps, args.seed)
    with open(args.out, "w") as out:
        json.dump({**result, "loaded_by_verl": loaded}, out)


if __name__ == "__main__":
    main()
