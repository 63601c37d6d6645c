"""Audit the ledger: is the chain whole, are the raw data unchanged, does every verdict follow from them?

`audit` checks, for every record: the hash chain and head file (`records.ledger.verify_chain`); for
verdict records, that the hypothesis content matches its SHA-256, that the registration it names
came earlier in the ledger and before the data, that the trials file exists and still has its
SHA-256, and that `framework.analysis.verdicts.analyze` (or `sequential_look` for sequential runs) on those
rows, with the hypothesis content and analysis settings as recorded, gives the same verdicts,
estimates, intervals and p-values (relative tolerance 1e-9). `history` shows how one hypothesis's
verdict moved as its environment changed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from framework.analysis import rules
from framework.analysis.verdicts import distinct_rows
from framework.core import definition as definition_mod
from framework.core.spec import Hypothesis, check_hypothesis, parse_yaml, validate_model
from framework.core.tolerance import close, close_list
from framework.core.trials import Trials, parse_trials
from framework.errors import SpecError
from framework.records import ledger, machine_audit
from framework.records import search_audit as search_problems
from framework.records.bisect_audit import bisect_problems
from framework.records.ledger import Problem


@dataclass
class RecordRow:
    line: int
    hash: str | None
    kind: str | None
    hypothesis: str | None
    verdict: str | None
    when: str | None
    problems: int = 0
    backend: str | None = None  # what produced a verdict's data: shown so a sim verdict never passes as real
    note: str = ""  # disclosed, not a problem: e.g. an unregistered extension of an earlier verdict
    rules_version: int | None = None  # the decision rules a verdict was made (and is recomputed) under
    today: str = ""  # what today's rules would say of a record made under older ones (not a problem)


@dataclass
class AuditReport:
    ledger: str
    records: list[RecordRow] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    head: tuple[int, str | None] = (0, None)

    @property
    def ok(self) -> bool:
        return not self.problems


# --------------------------------------------------------------------------- pure helpers




def _dump(obj: Any) -> Any:
    return obj.model_dump(mode="json") if hasattr(obj, "model_dump") else obj


def compare(record: dict[str, Any], analysis: Any) -> list[str]:
    """Differences between a stored verdict record and a recomputed Analysis (empty when they agree)."""
    got = _dump(analysis)
    out: list[str] = []
    if record.get("verdict") != got.get("verdict"):
        out.append(f"hypothesis verdict recorded {record.get('verdict')!r}, recomputed {got.get('verdict')!r}")
    recomputed = {p["id"]: p for p in got.get("predictions", [])}
    stored = {p.get("id"): p for p in record.get("predictions", [])}
    for pid in sorted(set(stored) | set(recomputed), key=str):
        s, r = stored.get(pid), recomputed.get(pid)
        if s is None or r is None:
            out.append(f"prediction {pid!r} is {'not recorded' if s is None else 'not recomputed'}")
            continue
        if s.get("verdict") != r.get("verdict"):
            out.append(f"prediction {pid!r}: verdict recorded {s.get('verdict')!r}, recomputed {r.get('verdict')!r}")
        for key in ("estimate", "p_value"):
            if not close(s.get(key), r.get(key)):
                out.append(f"prediction {pid!r}: {key} recorded {s.get(key)!r}, recomputed {r.get(key)!r}")
        if not close_list(s.get("ci"), r.get("ci")):
            out.append(f"prediction {pid!r}: ci recorded {s.get('ci')!r}, recomputed {r.get('ci')!r}")
    recomputed_c = {json.dumps(c["levels"], sort_keys=True): c for c in got.get("conditions", [])}
    for c in record.get("conditions", []):
        key = json.dumps(c.get("levels"), sort_keys=True)
        r = recomputed_c.get(key)
        if r is None:
            continue
        label = ", ".join(f"{k}={v}" for k, v in (c.get("levels") or {}).items())
        launches = c.get("launches") or {}
        if {k: launches.get(k) for k in ("ok", "failed")} != {k: r["launches"].get(k) for k in ("ok", "failed")}:
            out.append(f"condition {label}: launches recorded {launches}, recomputed {r['launches']}")
        if "mean" in (c.get("metric") or {}) and not close(c["metric"]["mean"], r["metric"].get("mean")):
            out.append(f"condition {label}: metric mean recorded {c['metric']['mean']!r}, "
                       f"recomputed {r['metric'].get('mean')!r}")
    return out


def resolve_trials(ledger_path: str | Path, trials_path: str) -> Path | None:
    """The trials file: absolute, or relative to the ledger's directory (then the working directory)."""
    p = Path(trials_path)
    candidates = [p] if p.is_absolute() else [Path(ledger_path).resolve().parent / p, Path.cwd() / p]
    return next((c for c in candidates if c.is_file()), None)


def hypothesis_from_record(record: dict[str, Any]) -> Any:
    """Rebuild the Hypothesis exactly as registered from the content stored in the record."""
    ref = record.get("hypothesis") or {}
    label = f"{ref.get('name')}@{str(ref.get('sha256'))[:12]} (as recorded)"
    h = validate_model(Hypothesis, parse_yaml(ref["content"], label), label)
    problems = check_hypothesis(h)
    if problems:
        raise SpecError(label, *problems[0])
    return h


def sequential_settings(settings: dict[str, Any]) -> dict[str, Any] | None:
    """The final look's settings of a sequential run, or None for a fixed design.

    The runner records `analysis.stopping = {"sequential": true, "looks": [{"look": k, ...}, ...]}` and
    the design (`analysis.design.sequential = {block, max_launches}`); a plain `analysis.sequential`
    mapping with `look`/`max_looks` (or `looks`) is accepted too.
    """
    stopping = settings.get("stopping") or {}
    seq = settings.get("sequential")
    if not (stopping.get("sequential") or seq):
        return None
    pool: dict[str, Any] = {k: v for k, v in (seq if isinstance(seq, dict) else {}).items() if k != "looks"}
    final = ((settings.get("details") or {}).get("sequential") or {})  # what sequential_look itself recorded
    pool.update({k: final[k] for k in ("look", "max_looks", "spending") if k in final})
    looks = stopping.get("looks") or (seq.get("looks") if isinstance(seq, dict) else None) or []
    if looks and "look" not in pool:
        pool["look"] = looks[-1].get("look", len(looks))
    design_seq = ((settings.get("design") or {}).get("sequential") or {})
    if "max_looks" not in pool and design_seq.get("block") and design_seq.get("max_launches"):
        block, most = int(design_seq["block"]), int(design_seq["max_launches"])
        first = min(block, most)
        pool["max_looks"] = math.ceil((most - first) / block) + 1
    pool.update({k: settings[k] for k in ("alpha", "method") if k in settings})
    seed = recorded_seed(settings)
    if seed is not None:
        pool["seed"] = seed
    return pool


def recorded_seed(settings: dict[str, Any]) -> int | None:
    """The seed the run's analysis used, as its record states (None: a record from before it was stated).

    The bootstrap is seeded from the run's effective design seed, which a command-line override can
    change; records written before the analysis stated its seed used the hypothesis file's.
    """
    seed = (settings.get("details") or {}).get("seed")
    return int(seed) if isinstance(seed, int) else None


def _as_analysis(result: Any) -> Any:
    if hasattr(result, "predictions") or (isinstance(result, dict) and "predictions" in result):
        return result
    if hasattr(result, "analysis"):
        return result.analysis
    if isinstance(result, (tuple, list)):
        for item in result:
            if hasattr(item, "predictions"):
                return item
    raise TypeError(f"cannot find an analysis in {type(result).__name__}")


def recompute(record: dict[str, Any], rows: list[dict[str, Any]], version: int | None = None) -> Any:
    """The analysis of `rows` with the hypothesis content and the settings the record holds, under the
    decision rules of `version` (default: the version the record was made under)."""
    ruleset = rules.rules_for(rules.version_of(record) if version is None else version)
    h = hypothesis_from_record(record)
    settings = record.get("analysis") or {}
    pool = sequential_settings(settings)
    if pool is not None:  # only the settings the look takes: older records may hold more
        look = {k: pool[k] for k in ruleset.look_settings if k in pool}
        return _as_analysis(ruleset.sequential_look(h, rows, **look))
    seed = recorded_seed(settings)
    return ruleset.analyze(h, rows, alpha=settings.get("alpha"), method=settings.get("method"),
                           **({"seed": seed} if seed is not None else {}))


def todays_difference(record: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """What today's rules would say of a record made under older ones ("" when the same, or when it is today's)."""
    if rules.version_of(record) == rules.CURRENT:
        return ""
    try:
        today = recompute(record, rows, rules.CURRENT)
    except Exception as exc:  # noqa: BLE001 - today's rules may not apply to an old design: say so
        return f"today's rules (v{rules.CURRENT}) cannot recompute it: {type(exc).__name__}: {exc}"
    diff = compare(record, today)
    if not diff:
        return f"today's rules (v{rules.CURRENT}) give the same verdicts"
    return f"under today's rules (v{rules.CURRENT}): " + "; ".join(diff)


# --------------------------------------------------------------------------- provenance


def _served_as(rows: list[dict[str, Any]]) -> dict[str, str]:
    """{backend: why} for what the trials say produced them: a server that named itself (`server_info.backend`,
    or the simulator's own `sim_*` description), or request rows timed on the simulator's model clock."""
    out: dict[str, str] = {}
    for r in Trials.of(rows).of_kinds("launch", "request"):  # a launch row says server_info, a request row clock
        info = r.get("server_info")
        if isinstance(info, dict):
            if isinstance(info.get("backend"), str):
                out.setdefault(info["backend"], f"launch {r.get('launch_id')}'s server_info says backend "
                                                f"{info['backend']!r}")
            elif any(str(k).startswith("sim_") for k in info):
                out.setdefault("sim", f"launch {r.get('launch_id')}'s server_info describes the simulator")
        elif r.get("clock") == "sim_model":
            out.setdefault("sim", f"request {r.get('trial_id')} was timed on the simulator's model clock")
    return out


def _gpu_names(gpu: Any) -> list[str] | None:
    return sorted(str(n) for n in gpu.get("names") or []) if isinstance(gpu, dict) else None


def provenance(record: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """Where the record says its data came from (backend, host, GPUs) against what the trials file, which is
    hashed, says: the servers' own `server_info` and the run's `environment` row. Empty when they agree; a
    record from before `environment` rows is held to its servers' word only."""
    out: list[str] = []
    backend = record.get("backend")
    env = record.get("environment") or {}
    for served, why in sorted(_served_as(rows).items()):
        if served != backend:
            out.append(f"the record says backend {backend!r}, but {why}")
    if env.get("backend") not in (None, backend):
        out.append(f"the record says backend {backend!r} but its environment says {env.get('backend')!r}")
    trials = Trials.of(rows)
    machines = trials.of_kind("environment")
    if machines:
        ran = machines[-1]  # the run that built the record wrote the last one (a resume adds its own)
        told = ran.get("backend")
        if env.get("launcher") not in (None, told):
            out.append(f"the record says the framework started backend {env.get('launcher')!r}, but the trials' "
                       f"environment row says {told!r}")
        if backend not in (told, "sim"):
            out.append(f"the record says backend {backend!r}, but the run was told to start {told!r}")
        for key in ("host", "machine"):
            if env.get(key) != ran.get(key):
                out.append(f"the record says {key} {env.get(key)!r}, but the trials' environment row says "
                           f"{ran.get(key)!r}")
        if _gpu_names(env.get("gpu")) != _gpu_names(ran.get("gpu")):
            out.append(f"the record says GPUs {_gpu_names(env.get('gpu'))}, but the trials' environment row says "
                       f"{_gpu_names(ran.get('gpu'))}")
    recorded = set(_gpu_names(env.get("gpu")) or [])
    for r in trials.of_kind("launch"):
        hardware = (r.get("server_info") or {}).get("hardware")
        used = set((hardware or {}).get("gpu_names") or []) if isinstance(hardware, dict) else set()
        if used and recorded and not used <= recorded:
            out.append(f"launch {r.get('launch_id')}'s server ran on {sorted(used)}, which the record's GPUs "
                       f"{sorted(recorded)} do not include")
            break
    return out


# --------------------------------------------------------------------------- one definition


def definition_problems(rec: dict[str, Any], rows: list[dict[str, Any]],
                        registrations: dict[str, dict[str, Any]]) -> list[str]:
    """The launches a verdict rests on were measured under the definition it names (framework.core.definition),
    recomputed from the trials file: a launch row's hypothesis hash must be the record's hypothesis sha256, its
    design hash the record's design's, its experiment hash the record's `analysis.definition`; else the launch is
    carried over by name, in the record's `analysis.carried_over` and in the amendment the record ran under.
    Rows from before definitions name none and are held to nothing here (as old records are)."""
    analysis = rec.get("analysis") or {}
    claimed = analysis.get("definition") if isinstance(analysis.get("definition"), dict) else {}
    own = {"hypothesis": (rec.get("hypothesis") or {}).get("sha256"),
           "design": definition_mod.design_sha256(analysis["design"]) if isinstance(analysis.get("design"), dict)
           else claimed.get("design"), "experiment": claimed.get("experiment")}
    out = [f"the record's definition names {p} {str(claimed[p])[:12]}, but its own {p} hashes to "
           f"{str(own[p])[:12]}" for p in ("hypothesis", "design") if claimed.get(p) not in (None, own[p])]
    amendment = registrations.get(str(rec.get("registration"))) or {}
    ledger_carry = {str(x) for x in amendment.get("carried_over") or []}
    record_carry = {str(x) for x in analysis.get("carried_over") or []}
    for launch_id in sorted(record_carry):
        if launch_id not in ledger_carry and launch_id.rpartition("-a")[0] not in ledger_carry:
            out.append(f"carries launch {launch_id} over, but the amendment it ran under "
                       f"({str(rec.get('registration'))[:12]}) does not list it")
    foreign = []
    for launch_id, row_def in definition_mod.launch_definitions(Trials.of(rows).of_kind("launch")).items():
        if not row_def:
            continue
        parts = [p for p in definition_mod.PARTS if own[p] is not None and row_def.get(p) != own[p]]
        if parts and launch_id not in record_carry:
            foreign.append((launch_id, parts))
    if foreign:
        parts = sorted({p for _, ps in foreign for p in ps}, key=definition_mod.PARTS.index)
        ids = ", ".join(i for i, _ in foreign[:4]) + (f", ... {len(foreign) - 4} more" if len(foreign) > 4 else "")
        out.append(f"{len(foreign)} launch(es) ({ids}) were measured under another definition "
                   f"({definition_mod.describe(parts)} differ from the record's), and no amendment carries them over")
    return out


# --------------------------------------------------------------------------- the anchor


def anchor_problems(records: list[tuple[int, dict[str, Any] | None]], expect: str,
                    count: int | None = None) -> list[Problem]:
    """The ledger must still hold the record whose hash was noted outside it (`expect`, 12 or more hex digits;
    at line `count` when a head file gave one); else it was rewritten since, or it is another ledger."""
    expect = expect.strip().lower()
    found = [(n, rec) for n, rec in records if rec is not None and str(rec.get("hash", "")).startswith(expect)]
    if not found:
        return [Problem(None, None, None, "anchor",
                        f"no record has the noted head hash {expect[:12]}: the ledger was rewritten since the head "
                        "was noted (or it is another ledger)")]
    line, rec = found[0]
    if count is not None and line != count:
        return [Problem(line, rec.get("hash"), _name(rec), "anchor",
                        f"the noted head {expect[:12]} was line {count}, but it is line {line} now: records before "
                        "it were removed or inserted")]
    return []


def _name(rec: dict[str, Any]) -> str | None:
    return (rec.get("hypothesis") or {}).get("name") if isinstance(rec.get("hypothesis"), dict) else None


def read_anchor(value: str) -> tuple[str, int | None]:
    """`expect_head=` as a hash, or as a head file (`{"count": n, "hash": h}`, e.g. one kept in git)."""
    path = Path(value)
    if len(value) < 200 and path.is_file():
        try:
            head = json.loads(path.read_text(encoding="utf-8"))
            return str(head["hash"]), int(head["count"])
        except (OSError, ValueError, KeyError, TypeError):
            raise SpecError(value, "expect_head", "not a head file ({\"count\": N, \"hash\": SHA})") from None
    if len(value) < 12 or any(c not in "0123456789abcdefABCDEF" for c in value):
        raise SpecError("command line", "expect_head", "a record hash (at least 12 hex digits) or a head file")
    return value, None


# --------------------------------------------------------------------------- the audit


def _check_verdict(rec: dict[str, Any], line: int, ledger_path: Path,
                   registrations: dict[str, dict[str, Any]]) -> tuple[list[Problem], str]:
    """The record's problems under the rules it was made with, and what today's rules would say of it."""
    import hashlib

    name = (rec.get("hypothesis") or {}).get("name")
    h = rec.get("hash")

    def problem(kind: str, msg: str) -> Problem:
        return Problem(line, h, name, kind, msg)

    out: list[Problem] = []
    ref = rec.get("hypothesis") or {}
    content = ref.get("content")
    if content is None:
        out.append(problem("hypothesis", "the hypothesis content is not recorded, so the verdict cannot be recomputed"))
    elif hashlib.sha256(content.encode("utf-8")).hexdigest() != ref.get("sha256"):
        out.append(problem("hypothesis", "the recorded hypothesis content does not match its sha256"))

    reg_hash = rec.get("registration")
    if reg_hash:
        reg = registrations.get(reg_hash)
        if reg is None:
            out.append(problem("registration",
                               f"names registration {reg_hash[:12]}, which is not earlier in the ledger"))
        else:
            if (reg.get("hypothesis") or {}).get("sha256") != ref.get("sha256"):
                out.append(problem("registration", f"ran a hypothesis (sha256 {str(ref.get('sha256'))[:12]}) other "
                                   f"than the one registered in {reg_hash[:12]}"))
            # registered before the run: by the order of ledger lines (`registrations` holds earlier lines only),
            # never by comparing clocks, which a loaded machine (or another one) moves

    trials = rec.get("trials") or {}
    path = resolve_trials(ledger_path, trials.get("path", "")) if trials.get("path") else None
    if path is None:
        out.append(problem("trials", f"trials file {trials.get('path')!r} not found"))
        return out, ""
    data = path.read_bytes()  # read once: hashed whole, hashed as the recorded prefix, parsed
    actual, recorded, prefix = hashlib.sha256(data).hexdigest(), trials.get("sha256"), trials.get("bytes")
    if actual != recorded:
        # a later resume into the same directory may have appended rows: the verdict stands on the recorded prefix
        if (isinstance(prefix, int) and 0 <= prefix <= len(data)
                and hashlib.sha256(data[:prefix]).hexdigest() == recorded):
            data = data[:prefix]
        else:
            out.append(problem("trials", f"trials file {trials.get('path')} changed: sha256 recorded "
                               f"{str(recorded)[:12]}, now {actual[:12]}"))
            return out, ""  # recomputing from altered data says nothing more
    rows = parse_trials(data, path)
    out += [problem("provenance", d) for d in provenance(rec, rows)]
    out += [problem("machine", d) for d in machine_audit.problems(rows, lambda p: resolve_trials(ledger_path, p))]
    out += [problem("definition", d) for d in definition_problems(rec, rows, registrations)]

    try:
        _, dropped = distinct_rows(rows)
    except ValueError as exc:
        dropped = {}
        out.append(problem("trials", str(exc)))
    if dropped.get("launch") or dropped.get("request"):
        out.append(problem("trials", f"trials file {trials.get('path')} repeats rows: {dropped.get('launch', 0)} "
                           f"duplicated launch row(s), {dropped.get('request', 0)} duplicated request row(s) "
                           f"(each launch is counted once)"))
    if content is None:
        return out, ""
    try:
        analysis = recompute(rec, rows)
    except NotImplementedError:
        out.append(problem("recompute", "framework.analysis.verdicts is not implemented yet; cannot recompute"))
        return out, ""
    except Exception as exc:  # noqa: BLE001 - any failure to recompute is an audit finding, not a crash
        out.append(problem("recompute", f"recomputing failed: {type(exc).__name__}: {exc}"))
        return out, ""
    out += [problem("recompute", d) for d in compare(rec, analysis)]
    return out, todays_difference(rec, rows)


def audit(ledger_path: str | Path = ledger.DEFAULT_LEDGER, expect_head: tuple[str, int | None] | None = None,
          ) -> AuditReport:
    """Verify the chain, the trials files and every verdict (and that the ledger still holds `expect_head`, a
    hash noted outside it, with its line when known); raise FileNotFoundError on a missing ledger."""
    path = Path(ledger_path)
    if not path.is_file():
        raise FileNotFoundError(str(path))
    report = AuditReport(str(path), problems=ledger.verify_chain(path), head=ledger.head_of(path))
    parsed = [(n, rec) for n, _, rec in ledger.lines(path)]
    if expect_head is not None:
        report.problems += anchor_problems(parsed, *expect_head)
    registrations: dict[str, dict[str, Any]] = {}
    explorations: dict[str, dict[str, Any]] = {}
    lines: dict[str, int] = {}  # each record's line: what "before" means in a ledger
    for n, rec in parsed:
        if rec is None:
            report.records.append(RecordRow(n, None, None, None, None, None))
            continue
        if isinstance(rec.get("hash"), str):
            lines.setdefault(rec["hash"], n)
        kind = rec.get("kind")
        row = RecordRow(n, rec.get("hash"), kind, (rec.get("hypothesis") or {}).get("name"), rec.get("verdict"),
                        rec.get("finished") or rec.get("amended") or rec.get("registered"), backend=rec.get("backend"))
        if kind in ("registration", "amendment") and isinstance(rec.get("hash"), str):
            registrations[rec["hash"]] = rec
        elif kind == "bisect":
            report.problems += bisect_problems(rec, n, path)
            row.note = f"bisection: {rec.get('outcome')}" + (f" ({rec['first_bad']})" if rec.get("first_bad") else "")
            row.rules_version = rules.version_of(rec)
        elif kind == "exploration":
            report.problems += search_problems.exploration_problems(rec, n, path)
            row.note = "exploratory (a search; no verdict)"
            if isinstance(rec.get("hash"), str):
                explorations[rec["hash"]] = rec
        elif kind == "verdict":
            problems, row.today = _check_verdict(rec, n, path, registrations)
            report.problems += problems
            if rec.get("search") is not None:
                report.problems += search_problems.link_problems(rec, n, path, explorations, registrations, lines)
            else:
                report.problems += search_problems.unlinked_problems(rec, n, explorations)
            row.rules_version = rules.version_of(rec)
            ext = (rec.get("analysis") or {}).get("extension")
            if ext:
                bound = ext.get("error_bound")
                shown = f"{bound:.3f}" if isinstance(bound, float) else bound or "unknown"
                row.note = ("extension (anytime-valid)" if ext.get("registered") else
                            f"UNREGISTERED EXTENSION: error up to {shown}")
        report.records.append(row)
    by_line: dict[int, int] = {}
    for p in report.problems:
        if p.line:
            by_line[p.line] = by_line.get(p.line, 0) + 1
    for row in report.records:
        row.problems = by_line.get(row.line, 0)
    report.problems.sort(key=lambda p: (p.line or 0, p.kind))
    return report


# --------------------------------------------------------------------------- history

ENV_FIELDS = ("backend", "server_version", "cuda", "gpu", "driver", "stack", "sim_profile", "server_args")


def _first(*values: Any) -> Any:
    return next((v for v in values if v not in (None, "", [], {})), None)


def environment_summary(rec: dict[str, Any]) -> dict[str, str | None]:
    """The few environment facts a verdict plausibly depends on, as short strings."""
    env = rec.get("environment") or {}
    conds = rec.get("conditions") or []
    cfg = rec.get("config") or {}
    gpu = env.get("gpu") or {}
    server_info = env.get("server_info") or env.get("server") or {}
    server_info = server_info if isinstance(server_info, dict) else {}
    versions = sorted({str(v) for c in conds
                       for v in [c.get("server_version"), (c.get("server_info") or {}).get("version")] if v})
    profiles = sorted({str(c["sim_profile"]) for c in conds if c.get("sim_profile")})
    cfg_sim = (cfg.get("sim") or {}) if isinstance(cfg.get("sim"), dict) else {}
    packages = env.get("packages") or {}
    stack = ", ".join(f"{k} {packages[k]}" for k in ("sglang", "torch", "flashinfer-python", "sgl-kernel")
                      if packages.get(k))
    args = sorted({" ".join(c.get("server_args") or []) for c in conds})
    return {
        "backend": _first(rec.get("backend"), env.get("backend")),
        "server_version": _first(env.get("server_version"), server_info.get("version"), ", ".join(versions)),
        "cuda": _first(env.get("cuda"), gpu.get("cuda") if isinstance(gpu, dict) else None),
        "gpu": _first(", ".join(sorted(set(gpu.get("names") or []))) if isinstance(gpu, dict) else str(gpu)),
        "driver": gpu.get("driver") if isinstance(gpu, dict) else None,
        "stack": stack or None,
        "sim_profile": _first(", ".join(profiles), env.get("sim_profile"), server_info.get("sim_profile"),
                              cfg_sim.get("profile"), cfg.get("sim_profile")),
        "server_args": " | ".join(args) if args else None,
    }


@dataclass
class HistoryRow:
    line: int
    hash: str
    kind: str  # registration | amendment | verdict
    when: str | None
    verdict: str | None
    predictions: dict[str, str]
    changed: dict[str, tuple[str | None, str | None]]  # environment field -> (before, after)
    flip: bool
    flipped: list[str]  # prediction ids (or "hypothesis") whose verdict changed
    note: str = ""
    backend: str | None = None


def history_rows(records: Iterable[tuple[int, dict[str, Any]]], name: str) -> list[HistoryRow]:
    """Pure: the hypothesis's registrations, amendments and verdicts in ledger order, with flips."""
    rows: list[HistoryRow] = []
    prev_env: dict[str, str | None] | None = None
    prev_verdict: dict[str, Any] | None = None
    for n, rec in records:
        if (rec.get("hypothesis") or {}).get("name") != name:
            continue
        kind = rec.get("kind")
        if kind in ("registration", "amendment"):
            diff = rec.get("diff") or ""
            added = sum(1 for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
            removed = sum(1 for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---"))
            note = (f"sha256 {str(rec['hypothesis'].get('sha256'))[:12]}" if kind == "registration" else
                    f"amended: +{added} -{removed} lines; sha256 {str(rec.get('previous_sha256'))[:12]} -> "
                    f"{str(rec['hypothesis'].get('sha256'))[:12]}")
            rows.append(HistoryRow(n, rec.get("hash", ""), kind, rec.get("amended") or rec.get("registered"),
                                   None, {}, {}, False, [], note))
            continue
        if kind != "verdict":
            continue
        env = environment_summary(rec)
        preds = {p.get("id"): p.get("verdict") for p in rec.get("predictions") or []}
        changed: dict[str, tuple[str | None, str | None]] = {}
        flipped: list[str] = []
        if prev_env is not None:
            changed = {k: (prev_env.get(k), env.get(k)) for k in ENV_FIELDS if prev_env.get(k) != env.get(k)}
        if prev_verdict is not None:
            if prev_verdict.get("verdict") != rec.get("verdict"):
                flipped.append("hypothesis")
            old = {p.get("id"): p.get("verdict") for p in prev_verdict.get("predictions") or []}
            flipped += [pid for pid, v in preds.items() if pid in old and old[pid] != v]
        rows.append(HistoryRow(n, rec.get("hash", ""), "verdict", rec.get("finished") or rec.get("started"),
                               rec.get("verdict"), preds, changed, bool(flipped), flipped,
                               ", ".join(f"{k}={v}" for k, v in env.items() if v and k != "server_args")
                               if prev_env is None else "", backend=rec.get("backend")))
        prev_env, prev_verdict = env, rec
    return rows


def history(ledger_path: str | Path, name: str) -> list[HistoryRow]:
    return history_rows(((n, rec) for n, _, rec in ledger.lines(ledger_path) if rec is not None), name)
