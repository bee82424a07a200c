"""Row "Samples": the run's kept top and bottom episodes from VictoriaLogs, with their texts."""

from __future__ import annotations

from grafana_foundation_sdk.builders import table
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from otel_rl_ops import promql

from rows.panels import RUN_VARIABLE, VICTORIALOGS, LogsQuery, Row

SAMPLES_QUERY = (
    f"{promql.logsql_stream('rl.run.id', RUN_VARIABLE)} rl.sample.selection:in(top,bottom) "
    "| sort by (_time desc) | limit 400 "
    "| sort by (_time desc) limit 1 partition by (rl.sample.id) "
    "| copy _msg as response "
    "| fields _time, rl.step, rl.sample.selection, rl.reward, prompt, response, target "
    "| sort by (_time desc) | limit 200"
)
"""LogsQL of the samples table: the run's kept top/bottom episodes, newest first, with their texts, each once. The
collector sends the response as the message (``VL-Msg-Field: response``), so it is read back from ``_msg``. A
resent record (delivery is at least once) has the same ``rl.sample.id``: of the newest 400 records, one per id."""


def row() -> Row:
    """The samples row."""
    samples = (
        table.Panel()
        .id(12)
        .title("Samples: top and bottom episodes")
        .description("Kept samples from VictoriaLogs (top-k and bottom-k by reward per step), newest first.")
        .datasource(VICTORIALOGS)
        .with_target(LogsQuery("A", SAMPLES_QUERY))
        .with_transformation(
            model.DataTransformerConfig(
                id_val="extractFields",
                options={"source": "labels", "format": "json", "replace": False, "keepTime": False},
            )
        )
        .with_transformation(
            model.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Line": True, "id": True, "labels": True},
                    "indexByName": {
                        "Time": 0,
                        "rl.step": 1,
                        "rl.sample.selection": 2,
                        "rl.reward": 3,
                        "prompt": 4,
                        "response": 5,
                        "target": 6,
                    },
                    "renameByName": {"rl.step": "step", "rl.sample.selection": "selection", "rl.reward": "reward"},
                },
            )
        )
        .cell_height(common.TableCellHeight.AUTO)
        .filterable(True)
    )
    return Row("Samples", 11, (samples.span(24).height(12),))
