"""Secrets never persist: a planted API key and token appear in no file a run writes."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cli_helpers import ROOT, framework, ledger_records, starts_hypothesis

from framework.core.design import conditions
from framework.core.spec import load_experiment, load_hypothesis
from framework.execution.backends import BackendSettings, server_spec
from framework.run.redaction import (
    Redactor,
    declared_names,
    is_secret_name,
    ledger_salt,
    literal_secret,
    looks_secret,
    secret_values,
)

KEY = "PLANTED-api-key-7f3a9c"
TOKEN = "PLANTED-hf-token-c4e1d2"

SINGLE = starts_hypothesis(
    "secret_smoke", "The server starts and serves with an API key.", "rtx_pro_6000_tp8",
    launches=2, requests=1)


def test_secret_names():
    assert all(map(is_secret_name, ["HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "APIKEY"]))
    assert not any(map(is_secret_name, ["CUDA_VISIBLE_DEVICES", "NCCL_DEBUG", "TOKENIZERS_PARALLELISM", "KEYS"]))


def test_secret_names_by_a_word_or_an_ending_and_the_users_own():
    # issue 31: these were outside the word list and landed in clear in the ledger, verdict.json and .hydra/
    assert all(map(is_secret_name, ["DB_PASS", "PGPASSWORD", "AZURE_OPENAI_KEY", "GH_AUTH", "MYSQL_PWD_PASSWORD",
                                    "REDIS_CREDENTIALS", "GITHUBTOKEN", "sentry-dsn"]))
    assert not any(map(is_secret_name, ["PWD", "MAX_TOKENS", "PASSAGE", "KEYBOARD", "MONKEY", "PATH", "HOME"]))
    assert is_secret_name("DB_URL", {"db_url"}) and not is_secret_name("DB_URL")
    assert declared_names(["A", "B"]) == declared_names("[A, 'B']") == {"A", "B"} and declared_names(None) == set()


def test_a_value_shaped_like_an_issued_key_is_secret_whatever_its_name():
    shaped = ["sk-" + "a1B2" * 6, "hf_" + "x" * 34, "ghp_" + "y" * 36, "AKIA" + "ABCDEFGHIJKLMNOP",
              "-----BEGIN RSA PRIVATE KEY-----\nMII", "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4"]
    assert all(map(looks_secret, shaped))
    assert not any(map(looks_secret, ["INFO", "/usr/lib/x86_64", "0,1,2,3", "sk-short", "https://example.org"]))
    values = secret_values({"env": {"NCCL_DEBUG": "INFO", "MY_CONFIG": shaped[0], "DB_DSN2": "postgres://u:pw@h/db"}},
                           declared_names(["DB_DSN2"]))
    assert set(values) == {shaped[0], "postgres://u:pw@h/db"}


def test_a_secret_on_the_command_line_is_refused_with_the_way_out():
    # the framework's argv is visible in `ps` for the whole run: a key is taken only from the environment
    assert literal_secret(["hypothesis=x", "backend.env.NCCL_DEBUG=INFO", "backend.api_key=${oc.env:K}"]) is None
    cases = ((f"backend.api_key={KEY}", "backend.api_key"), (f"+backend.env.HF_TOKEN={TOKEN}", "backend.env.HF_TOKEN"),
             (f"+backend.env.DB_PASS={KEY}", "backend.env.DB_PASS"),
             (f"+backend.env.PGPASSWORD={KEY}", "backend.env.PGPASSWORD"),
             (f"+backend.env.AZURE_OPENAI_KEY={KEY}", "backend.env.AZURE_OPENAI_KEY"),
             ("+backend.env.MY_CONFIG=sk-" + "a1B2" * 6, "backend.env.MY_CONFIG"))
    for arg, key in cases:
        field, way_out = literal_secret(["hypothesis=x", arg])
        assert field == key and "ps" in way_out and "${oc.env:" in way_out and KEY not in way_out
    assert literal_secret(["+backend.env.DB_URL=postgres://u:pw@h/db"]) is None
    declared = literal_secret(["secret_env=[DB_URL]", "+backend.env.DB_URL=postgres://u:pw@h/db"])
    assert declared is not None and declared[0] == "backend.env.DB_URL"


def test_a_literal_key_is_one_line_exit_2_before_anything_is_written(workdir):
    out = framework("run", "hypothesis=eagle3_allreduce", f"backend.api_key={KEY}", cwd=workdir)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert [ln for ln in out.stderr.splitlines() if ln.strip()] == [
        "error: command line: backend.api_key: a secret on the command line is visible to every user of this "
        "machine in `ps`: export it and pass backend.api_key='${oc.env:API_KEY}' (the quotes keep the shell "
        "from expanding it)"]
    assert not (workdir / "outputs").exists() and not (workdir / "verdicts.jsonl").exists()


def test_redactor_marks_with_a_salted_fingerprint(tmp_path):
    salt = ledger_salt(tmp_path / "v.jsonl")
    assert stat.S_IMODE((tmp_path / "v.jsonl.salt").stat().st_mode) == 0o600
    assert ledger_salt(tmp_path / "v.jsonl") == salt  # one salt per ledger: same key, same fingerprint
    r = Redactor(tuple(secret_values({"api_key": KEY, "env": {"HF_TOKEN": TOKEN, "MAX_TOKEN": "512"}})), salt)
    out = r.scrub({"argv": ["--api-key", KEY], "note": f"Bearer {KEY}", "n": 3, "env": {"MAX_TOKEN": "512"}})
    assert KEY not in json.dumps(out) and out["n"] == 3 and out["env"] == {"MAX_TOKEN": "512"}
    assert out["argv"][1] == r.marker(KEY) and out["argv"][1].startswith("[redacted hmac-sha256:")
    assert Redactor((KEY,), b"other salt").marker(KEY) != r.marker(KEY)


def test_the_sim_gets_its_key_through_the_environment_not_argv():
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    exp = load_experiment(ROOT / "experiments" / "rtx_pro_6000_tp8.yaml")
    cond = conditions(h)[0]
    for name, in_argv in (("sim", False), ("sglang", True)):  # SGLang takes it only as --api-key
        spec = server_spec(BackendSettings(name=name, api_key=KEY), exp, h, cond, port=1, seed=0,
                           log_path=Path("x.log"))
        assert (KEY in spec.argv) is in_argv and (spec.env.get("SIM_API_KEY") == KEY) is (not in_argv)


def test_a_short_api_key_is_refused_before_anything_starts(workdir):
    out = framework(
        "run", "hypothesis=eagle3_allreduce", "backend.api_key=${oc.env:K}", cwd=workdir, env={"K": "short"}
    )
    assert out.returncode == 2 and "backend.api_key" in out.stderr and "Traceback" not in out.stderr
    assert not (workdir / "outputs").exists()


@pytest.mark.e2e
def test_a_planted_key_is_in_no_file_a_run_writes(workdir):
    hyp = workdir / "hyp"
    hyp.mkdir()
    (hyp / "secret_smoke.yaml").write_text(SINGLE)
    out = framework("run", "hypothesis=secret_smoke", f"paths.hypotheses={hyp}", "backend.api_key=${oc.env:API_KEY}",
                    "+backend.env.HF_TOKEN=${oc.env:HF_TOKEN}", "backend.ground_truth=true", cwd=workdir,
                    env={"API_KEY": KEY, "HF_TOKEN": TOKEN})
    assert out.returncode == 0, out.stderr[-2000:]
    assert KEY not in out.stdout + out.stderr and TOKEN not in out.stdout + out.stderr
    written = [p for p in workdir.rglob("*") if p.is_file() and p.parent != hyp]
    assert len(written) > 10  # trials, verdict, summary, report, logs, .hydra/, ledger, head, salt
    leaks = [str(p) for p in written if b"PLANTED" in p.read_bytes()]
    assert leaks == []
    record = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert record["verdict"] == "supported"  # the sim demanded the key (it got it) and served
    assert record["environment"]["server"]["server_args"]["api_key"] == "***"
    assert record["config"]["backend"]["api_key"].startswith("[redacted hmac-sha256:")
    assert framework("audit", cwd=workdir).returncode == 0


@pytest.mark.e2e
def test_secrets_named_by_pattern_or_declared_are_in_no_file_a_run_writes(workdir):
    # issue 31: +backend.env.DB_PASS, PGPASSWORD and AZURE_OPENAI_KEY landed in clear in the ledger, verdict.json and
    # .hydra/; DB_URL is no secret by its name, the user declares it (secret_env)
    hyp = workdir / "hyp"
    hyp.mkdir()
    (hyp / "secret_smoke.yaml").write_text(SINGLE)
    env = {"DB_PASS": "PLANTED-db-pass-1", "PGPASSWORD": "PLANTED-pg-pass-2", "AZURE_OPENAI_KEY": "PLANTED-azure-3",
           "DB_URL": "postgres://user:PLANTED-url-4@db/x"}
    out = framework("run", "hypothesis=secret_smoke", f"paths.hypotheses={hyp}", "report=true", "secret_env=[DB_URL]",
                    *(f"+backend.env.{name}=${{oc.env:{name}}}" for name in env), cwd=workdir, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    written = [p for p in workdir.rglob("*") if p.is_file() and p.parent != hyp]
    assert any(p.name == "verdict.json" for p in written) and any(p.parent.name == ".hydra" for p in written)
    assert [str(p) for p in written if b"PLANTED" in p.read_bytes()] == []
    record = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert all(v.startswith("[redacted hmac-sha256:") for v in record["config"]["backend"]["env"].values())


def test_every_trials_row_is_scrubbed_where_a_server_takes_the_key_as_a_flag(tmp_path):
    from framework.run.writer import TrialsWriter

    writer = TrialsWriter(tmp_path / "trials.jsonl", Redactor((KEY,), b"salt"))
    writer.write({"kind": "launch", "launch_id": "a",
                  "argv": ["python", "-m", "sglang.launch_server", "--api-key", KEY],
                  "log_tail": [f"server_args=ServerArgs(api_key='{KEY}')"]})
    writer.close()
    text = (tmp_path / "trials.jsonl").read_text()
    assert KEY not in text and text.count("[redacted hmac-sha256:") == 2 and KEY not in json.dumps(writer.rows)


def test_a_key_in_the_runs_hydra_files_is_gone_before_the_first_launch(tmp_path, monkeypatch):
    # a key set in a config file reaches .hydra/config.yaml verbatim (Hydra writes it at job start);
    # a run killed mid-way must not leave it there, so it is scrubbed before anything is launched
    import framework.run.runner as runner
    from framework.run.compose import compose

    cfg = compose(["hypothesis=eagle3_allreduce", f"backend.api_key={KEY}", f"ledger={tmp_path / 'v.jsonl'}"])
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(f"backend:\n  api_key: {KEY}\n")
    seen: list[str] = []

    def measure(ctx, *args, **kwargs):
        seen.append((run_dir / ".hydra" / "config.yaml").read_text())
        raise KeyboardInterrupt  # stands in for a kill: nothing after this point runs

    monkeypatch.setattr(runner, "measure", measure)
    ctx = runner.resolve(cfg, run_dir, tmp_path)
    try:
        runner.run(ctx)
    except KeyboardInterrupt:
        pass
    assert len(seen) == 1 and KEY not in seen[0] and "[redacted hmac-sha256:" in seen[0]
