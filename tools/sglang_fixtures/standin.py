"""Build the sgl-kernel stand-in inside a recording venv (see record.sh): Python files only, no kernels.

usage: python standin.py SGL_KERNEL_WHEEL VENV

Copies `sgl_kernel/*.py` (and its Python subpackages) out of the CUDA wheel into the venv's
site-packages, with the architecture-specific ops load in `__init__.py` wrapped in try/except
(`common_ops = None` when it fails, as it must without CUDA) and the CUDA library preload off.
Nothing else is changed; no compiled file is copied. A marker file names it a stand-in.
"""

from __future__ import annotations

import sys
import sysconfig
import zipfile
from pathlib import Path

LOAD = "common_ops = _load_architecture_specific_ops()"
PRELOAD = "if torch.version.cuda is not None:\n    _preload_cuda_library()"


def main(wheel: str, venv: str) -> None:
    site = Path(sysconfig.get_path("purelib", vars={"base": venv, "platbase": venv}))
    dest = site / "sgl_kernel"
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith("sgl_kernel/") and name.endswith(".py"):
                out = site / name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(zf.read(name))
    init = dest / "__init__.py"
    text = init.read_text()
    if LOAD not in text or PRELOAD not in text:
        sys.exit(f"{init}: the ops load or the CUDA preload is not where sgl-kernel 0.3.21 has it")
    guarded = f"try:\n    {LOAD}\nexcept Exception:  # STAND-IN: no compiled ops\n    common_ops = None"
    text = text.replace(LOAD, guarded)
    text = text.replace(PRELOAD, "pass  # STAND-IN: no CUDA preload")
    init.write_text(text)
    (dest / "STAND_IN").write_text("Python files of sgl-kernel 0.3.21 only, for recording; not SGLang's kernels.\n")
    print(f"stand-in sgl_kernel in {dest}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
