"""Secrets never persist: API keys and secret-named environment values are kept out of every file a run writes.

What is secret: `backend.api_key`; every `backend.env` entry whose name says so, by a word of the name
(`HF_TOKEN`, `DB_PASS`, `AZURE_OPENAI_KEY`, `AWS_SECRET_ACCESS_KEY`, `GH_AUTH`, ...) or by how it ends
(`PGPASSWORD`, `GITHUBTOKEN`): `is_secret_name`; every env value that looks like a key whatever its name
(`sk-...`, `hf_...`, `ghp_...`, `AKIA...`, a private key block, a JWT: `looks_secret`); and the names a user
declares in the config (`secret_env: [DB_DSN, ...]`). Where they go:

- on the command line only as an interpolation of the environment, `backend.api_key='${oc.env:NAME}'`
  (`literal_secret` refuses a value: argv is visible in `ps`), so `.hydra/` and a sweep's
  `multirun.yaml` never hold the value (Hydra saves the config unresolved);
- the server gets the key through its environment where it reads one (the sim: `SIM_API_KEY`);
  SGLang takes it only as `--api-key` (visible in `ps` to users of the machine; see the README);
- everything the framework writes (trials rows, the ledger record, `verdict.json`, reports, the
  server's log once it stopped, `.hydra/` for keys set in config files) goes through a
  `Redactor`, which replaces each secret by a marker with a salted fingerprint:
  `[redacted hmac-sha256:0123456789ab]`. The salt is random per ledger (`LEDGER.salt`, mode
  0600), so runs on one ledger show whether they used the same key without revealing it.

A secret is replaced wherever it occurs, so it must be long enough not to occur by chance: an
`api_key` shorter than `MIN_LENGTH` characters is refused before the run starts, and a
secret-named env value that short (`MAX_TOKENS=512`) is not treated as a secret.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A word of an env name (split at _ - .) that says its value is secret; PWD (the working directory) and TOKENS
# (MAX_TOKENS, a count) are not.
SECRET_WORDS = frozenset({
    "PASS", "PASSWD", "PASSWORD", "PASSPHRASE", "SECRET", "SECRETS", "TOKEN", "KEY", "APIKEY",
    "ACCESSKEY", "PRIVATEKEY", "CREDENTIAL", "CREDENTIALS", "CREDS", "AUTH", "COOKIE", "DSN"})
# ...or how a name ends without a separator (PGPASSWORD, GITHUBTOKEN, OPENAIAPIKEY)
SECRET_SUFFIX = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|APIKEY|ACCESSKEY|PRIVATEKEY|CREDENTIALS?)$", re.IGNORECASE)
# A value that is a key whatever it is named: the shapes providers issue (OpenAI/Anthropic, Hugging Face, GitHub,
# GitLab, Slack, AWS access key ids, Google API keys, a PEM private key, a JWT).
SECRET_VALUE = re.compile(
    r"(?:sk-[A-Za-z0-9_-]{20,}|hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})")
MIN_LENGTH = 8


def is_secret_name(name: str, declared: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether an env name says its value is secret: a word of it, its ending, or a name the user declared."""
    upper = name.upper()
    words = re.split(r"[_.\-]+", upper)
    return upper in {d.upper() for d in declared} or any(w in SECRET_WORDS for w in words) or \
        bool(SECRET_SUFFIX.search(upper))


def looks_secret(value: str) -> bool:
    """Whether a value has the shape of an issued key or token (`SECRET_VALUE`), whatever it is named."""
    return bool(SECRET_VALUE.search(value))


def declared_names(value: Any) -> frozenset[str]:
    """`secret_env`: a list of env names (or one name, or a comma-separated string) the user declares secret."""
    if value is None:
        return frozenset()
    items = value if isinstance(value, (list, tuple)) else str(value).strip("[]").split(",")
    return frozenset(str(v).strip().strip("'\"") for v in items if str(v).strip())


def _secret_key(key: str, value: str, declared: frozenset[str]) -> bool:
    """Whether an override key (without +/++/~) sets a secret: by the setting's name or by the value's shape."""
    if key == "backend.api_key":
        return True
    head, _, name = key.rpartition(".")
    return head == "backend.env" and (is_secret_name(name, declared) or looks_secret(value))


def literal_secret(args: list[str]) -> tuple[str, str] | None:
    """(key, the way out) for the first secret given by value on the command line, else None.

    The framework's own argv is visible in `ps` to every user of the machine for the whole run and
    cannot be hidden once it runs, so a key is taken only as an interpolation of the environment.
    """
    declared = frozenset().union(*(declared_names(a.partition("=")[2]) for a in args
                                   if a.partition("=")[0].lstrip("+~") == "secret_env"))
    for arg in args:
        key, sep, value = arg.partition("=")
        bare = key.lstrip("+~")
        if sep and value and not value.startswith("${") and _secret_key(bare, value, declared):
            name = "API_KEY" if bare == "backend.api_key" else bare.rpartition(".")[2]
            return bare, (f"a secret on the command line is visible to every user of this machine in `ps`: export "
                          f"it and pass {key}='${{oc.env:{name}}}' (the quotes keep the shell from expanding it)")
    return None


def secret_values(backend: dict[str, Any], declared: frozenset[str] = frozenset()) -> list[str]:
    """The secret values of a resolved `backend` group: by name (with the user's `secret_env`) or by shape."""
    values = [backend.get("api_key")]
    values += [v for k, v in (backend.get("env") or {}).items()
               if is_secret_name(str(k), declared) or (v is not None and looks_secret(str(v)))]
    return sorted({str(v) for v in values if v is not None and len(str(v)) >= MIN_LENGTH}, key=len, reverse=True)


def fingerprint(value: str, salt: bytes) -> str:
    return hmac.new(salt, value.encode("utf-8"), hashlib.sha256).hexdigest()[:12]


def ledger_salt(ledger: Path) -> bytes:
    """The ledger's fingerprint salt (`LEDGER.salt`, 16 random bytes, mode 0600), created on first use."""
    path = Path(f"{ledger}.salt")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(os.urandom(16).hex() + "\n")
    return bytes.fromhex(path.read_text(encoding="ascii").strip())


@dataclass(frozen=True)
class Redactor:
    """Replaces known secret values by `[redacted hmac-sha256:...]` in strings, nested data and files."""

    secrets: tuple[str, ...] = ()
    salt: bytes = b""

    def marker(self, value: str) -> str:
        return f"[redacted hmac-sha256:{fingerprint(value, self.salt)}]"

    def text(self, s: str) -> str:
        for value in self.secrets:
            if value in s:
                s = s.replace(value, self.marker(value))
        return s

    def scrub(self, obj: Any) -> Any:
        if not self.secrets:
            return obj
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.scrub(k): self.scrub(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.scrub(v) for v in obj)
        return obj

    def scrub_file(self, path: Path) -> None:
        """Rewrite a text file with every secret replaced (atomically); no-op when none occurs."""
        if not self.secrets or not path.is_file():
            return
        data = path.read_bytes()
        if not any(v.encode("utf-8") in data for v in self.secrets):
            return
        text = data.decode("utf-8", errors="surrogateescape")
        for value in self.secrets:
            text = text.replace(value, self.marker(value))
        tmp = path.with_name(path.name + ".redacting")
        tmp.write_bytes(text.encode("utf-8", errors="surrogateescape"))
        os.replace(tmp, path)

    def scrub_tree(self, root: Path) -> None:
        for path in sorted(root.rglob("*")) if root.is_dir() else []:
            self.scrub_file(path)
