"""An experiment's `model_path` resolved: `asset:NAME` becomes the verified file or its cached conversion.

Its own module because it reads both the located file (framework.assets.smollm2) and the conversion
(framework.assets.smollm2_hf, which itself reads the located file): one place above both, no import circle.
"""

from __future__ import annotations

from pathlib import Path

from framework.assets import smollm2, smollm2_hf
from framework.errors import SpecError

# the conversions an experiment can name (framework.assets.smollm2_hf)
HF_NAMES = {f"{smollm2.NAME}-hf-float32": "float32", f"{smollm2.NAME}-hf-bfloat16": "bfloat16"}


def resolve_model_path(model_path: str, file: str | Path) -> str:
    """An experiment's `model_path`: `asset:smollm2` becomes the verified file's path; anything else is kept.

    `asset:smollm2-hf-float32` / `asset:smollm2-hf-bfloat16` become the cached Hugging Face conversion of
    the verified file (framework.assets.smollm2_hf), which must have been made first: converting needs
    torch and transformers and takes a minute, so a run never does it behind the user's back.
    `file` names the experiment in the error: an unknown asset name says which names exist.
    """
    if not model_path.startswith(smollm2.ASSET_PREFIX):
        return model_path
    name = model_path.removeprefix(smollm2.ASSET_PREFIX)
    allowed = ", ".join(smollm2.ASSET_PREFIX + n for n in (smollm2.NAME, *HF_NAMES))
    if name != smollm2.NAME and name not in HF_NAMES:
        raise SpecError(file, "model_path", f"unknown asset {name!r}; allowed: {allowed}")
    try:
        found = smollm2.locate()
    except SpecError as exc:
        raise SpecError(file, "model_path", f"{model_path}: {exc.message}") from None
    if name == smollm2.NAME:
        return str(found.path)
    directory = smollm2_hf.cache_dir(found.sha256, HF_NAMES[name])
    if smollm2_hf.manifest(directory) is None:
        raise SpecError(file, "model_path", f"{model_path}: not converted yet; run: python -m "
                                            f"framework.assets.smollm2_hf --dtype {HF_NAMES[name]}")
    return str(directory)
