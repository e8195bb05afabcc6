"""TensorBoard's HParams view of a sweep: each finished trial's settings and result.

The driver writes, under the sweep's ``tensorboard/`` folder, the experiment (the swept
names and the objective) once and one run per finished trial (``trial-<n>``: its
setting, its objective as a scalar, and how it ended), in the records the HParams
plugin reads (the same protobufs ``torch.utils.tensorboard``'s ``add_hparams`` writes,
built here from TensorBoard's own modules, without TensorFlow or torch).
``%alchemist_tensorboard SWEEP_ID`` opens TensorBoard on that folder.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from alchemist.sweep.spec import SweepSpec


def _summary(tag: str, content: Any) -> Any:
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.plugins.hparams.metadata import PLUGIN_DATA_VERSION, PLUGIN_NAME
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    data = HParamsPluginData(version=PLUGIN_DATA_VERSION, **content)
    meta = SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME, content=data.SerializeToString()
        )
    )
    return Summary(value=[Summary.Value(tag=tag, metadata=meta)])


def _write(run: Path, summaries: list[tuple[Any, int]]) -> None:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(run))
    now = time.time()
    for summary, step in summaries:
        writer.add_event(Event(summary=summary, wall_time=now, step=step))
    writer.close()


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"bool_value": v}
    if isinstance(v, (int, float)):
        return {"number_value": float(v)}
    return {"string_value": str(v)}


def write_experiment(root: Path, spec: SweepSpec) -> None:
    """The experiment: which names were swept and which metric judges them."""
    from tensorboard.plugins.hparams.api_pb2 import Experiment, HParamInfo, MetricInfo, MetricName
    from tensorboard.plugins.hparams.metadata import EXPERIMENT_TAG

    experiment = Experiment(
        hparam_infos=[HParamInfo(name=p.name) for p in spec.params],
        metric_infos=[MetricInfo(name=MetricName(tag=spec.objective))],
    )
    _write(root, [(_summary(EXPERIMENT_TAG, {"experiment": experiment}), 0)])


def write_trial(
    root: Path, spec: SweepSpec, number: int, params: dict[str, Any], value: float | None, ok: bool
) -> None:
    """Trial ``number``'s run: its setting, its objective (if any) and its end."""
    from google.protobuf.struct_pb2 import Value
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams.api_pb2 import Status
    from tensorboard.plugins.hparams.metadata import SESSION_END_INFO_TAG, SESSION_START_INFO_TAG
    from tensorboard.plugins.hparams.plugin_data_pb2 import SessionEndInfo, SessionStartInfo

    start = SessionStartInfo(start_time_secs=time.time())
    for name, v in params.items():
        start.hparams[name].CopyFrom(Value(**_value(v)))
    records = [(_summary(SESSION_START_INFO_TAG, {"session_start_info": start}), 0)]
    if value is not None:
        scalar = Summary(value=[Summary.Value(tag=spec.objective, simple_value=float(value))])
        records.append((scalar, 0))
    end = SessionEndInfo(status=Status.STATUS_SUCCESS if ok else Status.STATUS_FAILURE)
    records.append((_summary(SESSION_END_INFO_TAG, {"session_end_info": end}), 0))
    _write(root / f"trial-{number}", records)
