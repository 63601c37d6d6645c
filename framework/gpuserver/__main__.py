"""`python -m framework.gpuserver` runs `python -m framework.servers.gpu` (the documented alias)."""

import runpy

runpy.run_module("framework.servers.gpu", run_name="__main__", alter_sys=True)
