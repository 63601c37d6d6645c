"""The server's own Prometheus counters, as kept at the end of a launch."""

from __future__ import annotations

import sys

from framework.execution.backends import BackendSettings
from framework.execution.client import server_metrics
from framework.execution.launcher import ServerProcess, ServerSpec, free_port
from framework.execution.prometheus import parse


def test_prometheus_samples_with_the_backends_prefix():
    text = "\n".join([
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{model_name="m"} 2.0',
        'vllm:prompt_tokens_total{model_name="m"} 1234.0',
        'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 7.0',
        "python_gc_objects_collected_total 10.0",
        "vllm:broken NaN",
    ])
    assert parse(text, "vllm:") == {
        'vllm:num_requests_running{model_name="m"}': 2.0,
        'vllm:prompt_tokens_total{model_name="m"}': 1234.0,
        'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"}': 7.0,
    }


def test_label_values_with_braces_and_a_bad_line_are_handled_by_the_library_parser():
    text = 'sglang:x{path="/a}b"} 1.0\nsglang:y 2.0\nsglang:z{ 3\nsglang:w 4.0\n'
    assert parse(text, "sglang:") == {'sglang:x{path="/a}b"}': 1.0, "sglang:y": 2.0}  # kept up to the bad line


def test_a_launch_keeps_the_servers_own_counters(tmp_path):
    port = free_port()
    argv = [sys.executable, "-m", "framework.servers.sim", "--model-path", "m", "--tp-size", "8", "--port", str(port),
            "--enable-metrics", "--sim-speedup", "20"]
    with ServerProcess(ServerSpec(argv, "127.0.0.1", port, tmp_path / "sim.log", ready_timeout_s=60)) as server:
        counters = server_metrics(server.spec.base_url, BackendSettings(name="sim"))
        assert server_metrics(server.spec.base_url, BackendSettings(name="llamacpp")) is None  # no metrics route
    assert counters and all(name.startswith("sglang:") for name in counters)
