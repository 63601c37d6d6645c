"""Alias kept for `python -m framework.sim` and for run directories written before the redesign:
the simulated server lives in :mod:`framework.servers.sim`."""
