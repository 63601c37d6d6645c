"""Alias kept for `python -m framework.gpuserver` and for run directories written before the redesign:
the GPU server lives in :mod:`framework.servers.gpu`."""
