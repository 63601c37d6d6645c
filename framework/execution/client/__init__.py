"""The HTTP workload client: executes a workload plan (framework.core.workload) over real HTTP, on asyncio.

Endpoints (`workload.endpoint`, else the backend's protocol): SGLang's native streaming
`POST /generate` (`input_ids` or `text`), and OpenAI's `POST /v1/completions` and
`/v1/chat/completions` with `stream: true`. Every figure is on the model's clock; errors and streams
cut mid-way become failed rows with a reason; nothing is dropped silently.

One concept per module:

- `stream`: raw reads into chunks (events split on bytes, plain events counted from their bytes), server-sent
  events into token counts, chunk times into the request's figures (pure);
- `request`: one request's body, and sending it with every chunk stamped as the socket delivered it, measured
  as a RequestRow (framework.core.trials, the one model of a request row);
- `connection`: the keep-alive policy (the pool's idle limit below the server's keep-alive) and which failed
  sends are safe to send again on a fresh connection;
- `loops`: the closed and open loops on one event loop, measuring the client's own timing;
- `selfcheck`: from those, whether the client fell behind and by how much its figures may be off;
- `server`: what the server says about itself (info, served model, Prometheus counters);
- `plan`: the launch's plan, with the workload's dataset read from disk;
- `workers`: the same loops on N worker processes sharing one schedule and one clock (`client.workers`).

This package re-exports the names its callers use, so they import from `framework.execution.client`.
"""

from framework.execution.client.loops import run_workload
from framework.execution.client.plan import resolve_plan
from framework.execution.client.request import (
    generate_body,
    measure_request,
    prompt_ids,
    request_body,
)
from framework.execution.client.selfcheck import client_health
from framework.execution.client.server import server_info, server_metrics
from framework.execution.client.stream import sse_data, summarize_stream, token_times
from framework.execution.client.workers import worker_count

__all__ = ["client_health", "generate_body", "measure_request", "prompt_ids", "request_body", "resolve_plan",
           "run_workload", "server_info", "server_metrics", "sse_data", "summarize_stream", "token_times",
           "worker_count"]
