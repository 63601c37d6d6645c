"""One launch: start the server (or probe the endpoint), measure its workload, stop it, and write every
outcome to the trials file the moment it happens."""

from __future__ import annotations

from typing import Any

from framework.core import design as design_mod
from framework.core import machine as machine_mod
from framework.core import outputs as outputs_mod
from framework.core.trials import FORMAT, LaunchEndRow, LaunchRow, RequestRow, WorkloadRow
from framework.core.vocabulary import LAUNCH_LOST_REQUEST
from framework.errors import LaunchError
from framework.execution import client
from framework.execution.backends import server_spec, time_scale_of
from framework.execution.failures import classify, lost_requests
from framework.execution.launcher import ENDPOINT_PROBE_S, ServerProcess, free_port, log_tail, unreachable
from framework.present.progress import RunProgress
from framework.records import environment
from framework.run.context import RunContext
from framework.run.writer import TrialsWriter, now_iso

CLASSIFY_LINES = 400  # log lines read to classify a failure (a vLLM traceback runs long); the row keeps 20

CRASH_SETTLE_S = 5.0  # after a lost connection, how long a dying server gets to exit before it counts as alive

def run_launch(ctx: RunContext, planned: design_mod.PlannedLaunch, attempt: int,
               writer: TrialsWriter, progress: RunProgress) -> None:
    h, d = ctx.hypothesis, ctx.design
    cond = planned.condition
    workload = design_mod.workload_for(h, ctx.experiment, cond)
    if cond.index in outputs_mod.capture_conditions(h):  # an outputs prediction compares what it generates
        workload = workload.model_copy(update={"keep_outputs": True})
    workers = client.worker_count(ctx.client_workers, workload)
    launch_id = f"{planned.launch_id}-a{attempt}"
    common = {"format": FORMAT, "launch_id": launch_id, "condition": cond.index, "levels": cond.levels}
    planned_fields = {**common, "replicate": planned.replicate, "block": planned.block, "attempt": attempt,
                      "seed": planned.seed,  # what every launch row of this launch says of its plan
                      "machine": ctx.machine or None,  # and where it ran (framework.core.machine)
                      "definition": ctx.definition}  # and what it measured (framework.core.definition)
    started = now_iso()
    server: ServerProcess | None = None
    row = ctx.backend.table
    if not row.starts_server:
        base_url, argv, startup = str(ctx.backend.url).rstrip("/"), [], 0.0
        problem = unreachable(base_url, min(ctx.backend.ready_timeout_s, ENDPOINT_PROBE_S))
        if problem:  # no answer at all: no evidence about the server (framework.core.evidence)
            writer.write(LaunchRow(
                **planned_fields,
                ok=False, reachable=False, error=problem, started=started, finished=now_iso(),
            ).to_json())
            writer.sync()
            progress.launch_failed(cond, problem)
            return
    else:
        port = free_port(ctx.backend.host)
        log_path = ctx.run_dir / "logs" / f"{launch_id}.log"
        spec = server_spec(ctx.backend, ctx.experiment, h, cond, port=port, seed=planned.seed, log_path=log_path,
                           machine=(ctx.machine or {}).get("label") or (ctx.machine or {}).get("id"))
        base_url, argv = spec.base_url, spec.argv
        server = ServerProcess(spec).start()
        try:
            startup = server.wait_ready()
        except LaunchError as exc:
            server.stop()
            ctx.redactor.scrub_file(log_path)
            failure = classify(exc.exit_code, log_tail(log_path, CLASSIFY_LINES), row.failure_patterns,
                               timed_out=exc.timed_out, summary=exc.message)
            release = server.wait_released(ctx.backend.settle_timeout_s)
            writer.write(LaunchRow(
                **planned_fields,
                ok=False, exit_code=exc.exit_code, error=failure.message(), failure_class=failure.cls,
                failure_line=failure.line, log_tail=exc.log_tail, argv=argv, started=started, finished=now_iso(),
                release=release.as_dict(),
            ).to_json())
            writer.sync()
            progress.launch_failed(cond, failure.message())
            return
    lost_connection = False  # a request lost its connection: the server may be dying right now
    lost: dict[str, Any] = {"sent": 0, "classes": {}, "first": None}  # requests the server did not serve
    try:
        info = client.server_info(base_url, ctx.backend.api_key, row.info_paths)
        if ctx.machine:  # the GPUs its server says it used, where it names them (the GPU server)
            planned_fields["machine"] = machine_mod.with_server_gpus(ctx.machine, info)
        writer.write(LaunchRow(
            **planned_fields,
            ok=True, startup_s=startup, argv=argv, server_info=info, started=started, finished=now_iso(),
            client_workers=workers, load=environment.load(),
        ).to_json())

        def on_row(index: int, warmup: bool, row: dict[str, Any]) -> None:
            nonlocal lost_connection
            lost_connection |= row.get("error_class") in ("connection", "connection_refused")
            cls = row.get("error_class")
            lost["sent"] += cls != "cancelled"
            if cls in LAUNCH_LOST_REQUEST:
                lost["classes"][cls] = lost["classes"].get(cls, 0) + 1
                lost["first"] = lost["first"] or (cls, str(row.get("error")))
                if cls == "connection_refused":
                    lost.setdefault("first_refused", str(row.get("error")))
            writer.write(RequestRow(
                **common, trial_id=f"{launch_id}-q{index}", index=index, warmup=warmup, **row,
            ).to_json())
            progress.request_done(warmup)

        resolved = client.run_workload(
            base_url, workload, requests_n=d.requests, warmup=d.warmup, seed=planned.seed,
            time_scale=time_scale_of(ctx.backend, info), api_key=ctx.backend.api_key, on_row=on_row,
            protocol=ctx.backend.effective_protocol, base_dir=ctx.hypothesis_path.parent, workers=workers,
        )
        writer.write(WorkloadRow(**common, **resolved).to_json())
        health = resolved.get("client") or {}
        if health.get("bottleneck"):
            progress.note(f"warning: the client, not the server, may have been the bottleneck in {launch_id}: "
                          + "; ".join(health.get("reasons") or []))
    finally:
        if server is not None:
            end_launch(ctx, server, common, writer, progress, cond, lost_connection=lost_connection, lost=lost)
        elif (failure := lost_requests(lost)) is not None:  # an endpoint: no process, but the same rule
            progress.launch_failed(cond, failure.message())
            writer.write(LaunchEndRow(**common, definition=ctx.definition, ok=False,
                                      requests_lost=dict(sorted(lost["classes"].items())),
                                      failure_class=failure.cls, failure_line=failure.line, error=failure.message(),
                                      finished=now_iso()).to_json())
        writer.sync()

def end_launch(ctx: RunContext, server: ServerProcess, common: dict[str, Any], writer: TrialsWriter,
               progress: RunProgress, cond: design_mod.Condition, lost_connection: bool = False,
               lost: dict[str, Any] | None = None) -> None:
    """Stop a server that started; record whether it served its whole workload and how long the machine took
    to free up.

    A launch is ok only if it did: a server that died on its own (crash_after_ready, the signal as its line
    when the log tells nothing) or cut streams, hung up, stalled or refused connections (`lost`, see
    `framework.execution.failures.lost_requests`) fails it. After a request lost its connection the server
    gets `CRASH_SETTLE_S` to finish dying before it counts as alive.
    """
    crashed = server.exited_on_its_own(wait_s=CRASH_SETTLE_S if lost_connection else 0.0)
    counters = client.server_metrics(server.spec.base_url, ctx.backend) if crashed is None else None
    exit_code = server.stop()
    ctx.redactor.scrub_file(server.spec.log_path)
    failure = None
    if crashed is not None:
        failure = classify(crashed, log_tail(server.spec.log_path, CLASSIFY_LINES), ctx.backend.table.failure_patterns,
                           after_ready=True, summary=f"server exited with code {crashed} while being measured")
    else:
        failure = lost_requests(lost or {})
    if failure is not None:
        progress.launch_failed(cond, failure.message())
    release = server.wait_released(ctx.backend.settle_timeout_s)
    writer.write(LaunchEndRow(
        **common, definition=ctx.definition, ok=failure is None, exit_code=exit_code, crashed=crashed is not None,
        requests_lost=dict(sorted((lost or {}).get("classes", {}).items())) or None,
        failure_class=failure.cls if failure else None, failure_line=failure.line if failure else None,
        error=failure.message() if failure else None, release=release.as_dict(), server_metrics=counters,
        finished=now_iso(),
    ).to_json())
