"""audit's cross-checks: the record's backend, host and GPUs against what its (hashed) trials say, and the
external anchor (`expect_head`) that catches a consistent rewrite of ledger and trials together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.errors import SpecError
from framework.records import audit, ledger

H200 = {"names": ["NVIDIA H200", "NVIDIA H200"], "count": 2, "driver": "580", "cuda": "13.0"}


def _record(backend: str = "sim", host: str = "node1", gpu: dict | None = None, launcher: str | None = None) -> dict:
    return {"kind": "verdict", "backend": backend,
            "environment": {"backend": backend, "launcher": launcher or backend, "host": host, "machine": "x86_64",
                            "gpu": gpu}}


def _rows(told: str = "sim", served: str | None = "sim", host: str = "node1", gpu: dict | None = None,
          hardware: list[str] | None = None, clock: str | None = "sim_model") -> list[dict]:
    info = {"version": "0.5.9"}
    if served is not None:
        info["backend"] = served
    if hardware is not None:
        info["hardware"] = {"gpu_names": hardware}
    return [
        {"kind": "environment", "backend": told, "host": host, "machine": "x86_64", "gpu": gpu, "written": "t"},
        {"kind": "launch", "launch_id": "c0-r0-a1", "condition": 0, "ok": True, "server_info": info},
        {"kind": "request", "trial_id": "c0-r0-a1-q0", "launch_id": "c0-r0-a1", "condition": 0, "ok": True,
         "clock": clock},
    ]


def test_an_honest_record_agrees_with_its_trials() -> None:
    assert audit.provenance(_record(), _rows()) == []
    assert audit.provenance(_record("gpu", gpu=H200), _rows("gpu", "gpu", gpu=H200, hardware=["NVIDIA H200"],
                                                              clock=None)) == []
    # an endpoint that is the simulator is labelled sim, though the framework was told `endpoint`
    assert audit.provenance(_record("sim", launcher="endpoint"), _rows("endpoint")) == []


def test_a_sim_record_relabelled_as_sglang_is_caught() -> None:
    forged = _record("sglang")
    problems = audit.provenance(forged, _rows())
    assert any("backend 'sglang'" in p and "server_info says backend 'sim'" in p for p in problems), problems
    assert any("told to start 'sim'" in p for p in problems), problems
    # even without the server's own word, the model clock of its requests gives it away
    assert any("model clock" in p for p in audit.provenance(forged, _rows(served=None)[1:]))


def test_forged_host_and_gpus_are_caught() -> None:
    assert any("host 'node1'" in p and "'node9'" in p for p in audit.provenance(_record(host="node1"),
                                                                                 _rows(host="node9")))
    forged = _record("gpu", gpu={"names": ["NVIDIA B200"]})
    problems = audit.provenance(forged, _rows("gpu", "gpu", gpu=H200, hardware=["NVIDIA H200"], clock=None))
    assert any("GPUs ['NVIDIA B200']" in p for p in problems), problems
    assert any("ran on ['NVIDIA H200']" in p for p in problems), problems


def test_records_from_before_environment_rows_are_held_to_the_servers_word_only() -> None:
    old_rows = _rows()[1:]
    assert audit.provenance(_record(host="anything"), old_rows) == []
    assert audit.provenance(_record("vllm"), old_rows)


def _fill(path: Path, n: int) -> list[dict]:
    return [ledger.append(path, {"kind": "note", "i": i}) for i in range(n)]


def _reseal(path: Path, records: list[dict]) -> None:
    """A consistent rewrite: every hash and link recomputed, and the head file with them."""
    prev, out = ledger.GENESIS, []
    for rec in records:
        out.append(ledger.seal(rec, prev))
        prev = out[-1]["hash"]
    path.write_text("".join(ledger.canonical_json(r) + "\n" for r in out))
    Path(str(path) + ".head").write_text(json.dumps({"count": len(out), "hash": prev}))


def test_the_anchor_catches_a_consistent_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    recs = _fill(path, 3)
    noted = tmp_path / "kept-in-git.head"
    noted.write_text(Path(str(path) + ".head").read_text())
    anchor = audit.read_anchor(str(noted))
    assert anchor == (recs[-1]["hash"], 3)
    assert audit.anchor_problems([(n, r) for n, _, r in ledger.lines(path)], *anchor) == []
    _fill(path, 1)  # appending later is fine: the noted record is still where it was
    assert audit.audit(path, anchor).ok

    edited = [dict(r, i=r["i"] + 10) if r["i"] == 1 else r for r in ledger.read(path)]
    _reseal(path, edited)
    assert ledger.verify_chain(path) == []  # the files alone cannot tell
    report = audit.audit(path, anchor)
    assert [p.kind for p in report.problems] == ["anchor"] and "rewritten" in report.problems[0].message
    assert not audit.audit(path, audit.read_anchor(recs[-1]["hash"][:16])).ok


def test_the_anchor_catches_a_removed_record_before_it(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    recs = _fill(path, 3)
    kept = [r for r in ledger.read(path)]
    _reseal(path, [kept[0], kept[2]])  # the noted record is gone (resealed: its hash changed)
    assert not audit.audit(path, (recs[-1]["hash"], 3)).ok
    path.write_text("".join(ledger.canonical_json(r) + "\n" for r in kept[1:]))  # cut the first, keep the rest
    problems = audit.anchor_problems([(n, r) for n, _, r in ledger.lines(path)], recs[-1]["hash"], 3)
    assert [p.kind for p in problems] == ["anchor"] and "line 3" in problems[0].message


@pytest.mark.parametrize("value", ["abc", "zz" * 10, "not-a-file-or-hash"])
def test_a_bad_anchor_is_one_line(value: str) -> None:
    with pytest.raises(SpecError, match="expect_head"):
        audit.read_anchor(value)


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pre_redesign"


@pytest.mark.parametrize("edit", ["relabel", "host_and_gpu", "delete_verdict"])
def test_consistent_rewrites_of_a_real_sim_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: str) -> None:
    """Records of real simulated runs, rewritten with every hash, link and the head recomputed: the relabel
    is caught by what the servers said in the trials, every rewrite by the head noted before it."""
    import shutil

    shutil.copytree(FIXTURES, tmp_path / "fx")
    monkeypatch.chdir(tmp_path / "fx")  # the records name their trials relative to the ledger's directory
    path = tmp_path / "fx" / "sim_hypotheses.jsonl"
    assert audit.audit(path).ok
    noted = audit.read_anchor(str(Path(str(path) + ".head")))
    records = list(ledger.read(path))
    verdicts = [i for i, r in enumerate(records) if r["kind"] == "verdict"]
    first = records[verdicts[0]]
    assert first["backend"] == "sim"
    if edit == "relabel":  # a simulated verdict made to read as real hardware, everywhere the record says it
        first["backend"] = "sglang"
        first["environment"].update(backend="sglang", launcher="sglang")
        first["config"]["backend"]["name"] = "sglang"
    elif edit == "host_and_gpu":
        first["environment"].update(host="gpu-node-7", gpu={"names": ["NVIDIA H200"] * 8, "count": 8})
    else:
        del records[verdicts[0]]
    _reseal(path, records)
    assert ledger.verify_chain(path) == []
    kinds = {p.kind for p in audit.audit(path).problems}
    if edit == "relabel":
        relabelled = [p for p in audit.audit(path).problems if p.kind == "provenance"]
        assert relabelled and {p.line for p in relabelled} == {verdicts[0] + 1}, kinds
        assert "server_info says backend 'sim'" in relabelled[0].message
    assert {p.kind for p in audit.audit(path, noted).problems} >= {"anchor"}
