"""Every run in which a compared condition has no usable measurement exits 3 and names the cause (issue 21)."""

from __future__ import annotations

import pytest
from cli_helpers import ROOT, framework, ledger_records

from framework.analysis import rules

FAST = ["backend.speedup=20", "report=false"]


def _two_levels(workdir, level_b: str, extra: str = "") -> list[str]:
    hyp = workdir / "hyp"
    hyp.mkdir()
    (hyp / "nd.yaml").write_text(f"""\
name: nd
statement: Two levels of one server.
experiment: rtx_pro_6000_tp8
{extra}
factors:
  f:
    reference: a
    levels:
      a: {{}}
      b: {level_b}
predictions:
  - {{id: p, kind: equivalent, factor: f, level: b, margin: 0.5}}
design: {{launches: 2, requests: 2, warmup: 0}}
""")
    return ["hypothesis=nd", f"paths.hypotheses={hyp}", f"paths.experiments={ROOT / 'experiments'}", *FAST]


@pytest.mark.e2e
def test_a_condition_whose_every_launch_timed_out_is_no_data_exit_3(workdir):
    out = framework("run", *_two_levels(workdir, "{server_args: [--sim-fault-hang-before-ready]}"),
                    "backend.ready_timeout_s=3", cwd=workdir)
    assert out.returncode == 3, out.stderr[-3000:]
    assert ("error: no data: condition f=b measured nothing: all 2 launch(es) failed to start ('ready_timeout"
            in out.stderr)
    (record,) = [r for r in ledger_records(workdir / "verdicts.jsonl") if r["kind"] == "verdict"]
    assert record["verdict"] == "inconclusive" and set(record["analysis"]["details"]["no_data"]) == {"1"}
    assert record["rules_version"] == rules.CURRENT  # the version that turned this on (2) or a later one
    assert framework("audit", cwd=workdir).returncode == 0


@pytest.mark.e2e
def test_a_metric_that_is_zero_in_every_launch_is_no_data_exit_3(workdir):
    out = framework("run", *_two_levels(workdir, "{server_args: [--enable-flashinfer-allreduce-fusion]}",
                                        "metric: goodput\nslo: {ttft_s: 1.0e-12}"), cwd=workdir)
    assert out.returncode == 3, out.stderr[-3000:]
    assert "goodput is 0 or undefined in every launch under slo {'ttft_s': 1e-12}" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_command_backend_that_cannot_import_is_no_data_exit_3(workdir):
    exps = workdir / "exps"
    exps.mkdir()
    (exps / "one_gpu.yaml").write_text("name: one_gpu\nmodel_path: m\ntp_size: 1\n")
    args = _two_levels(workdir, "{server_args: [--x, 1]}")
    args = [f"paths.experiments={exps}" if a.startswith("paths.experiments=") else a for a in args
            if not a.startswith("backend.speedup=")]
    (workdir / "hyp" / "nd.yaml").write_text((workdir / "hyp" / "nd.yaml").read_text().replace(
        "rtx_pro_6000_tp8", "one_gpu"))
    out = framework("run", *args, "backend=command", 'backend.argv=["{python}",-m,no_such_module_21,--port,"{port}"]',
                    cwd=workdir)
    assert out.returncode == 3, out.stderr[-3000:]
    assert "all 2 launch(es) failed to start" in out.stderr and "No module named no_such_module_21" in out.stderr
    assert "Traceback" not in out.stderr
