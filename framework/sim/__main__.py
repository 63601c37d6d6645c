"""`python -m framework.sim` runs `python -m framework.servers.sim` (the documented alias)."""

import runpy

runpy.run_module("framework.servers.sim", run_name="__main__", alter_sys=True)
