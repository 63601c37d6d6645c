"""A streaming server with a known schedule: ground truth for measuring the client itself.

``python -m framework.servers.schedule --port P [--first-token-ms 20] [--interval-ms 2] [--tokens 256]
[--truth-log FILE]`` serves OpenAI's ``/v1/completions`` and ``/v1/chat/completions`` (SSE, one token per
event, per-chunk usage when asked) on its own tiny HTTP/1.1 layer over asyncio (uvloop when installed):
no framework, no model, a few microseconds of work per token, so one core offers well over 100k tok/s
and what a client reports can be compared with what the server did. Every token's write time
(``time.monotonic()``, the clock ``time.perf_counter()`` reads on Linux) is kept per request and written
to the truth log (one JSON line per request) when the request ends. ``benchmarks/client_capacity.py``
measures clients against it; the backend table reaches it as ``backend=schedule``.
"""
