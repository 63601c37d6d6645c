"""Whether a request's connection was refused: nothing listened at the server's address.

A refused connection is not a cut stream or a dropped one (issue 31: a dead endpoint's 394 refused
connections were read as "streams cut while the server stayed up"): the server is gone, or never bound its
port, so the request never reached it. aiohttp wraps the socket's error (`ClientConnectorError.os_error`);
the errno is what tells.
"""

from __future__ import annotations

import errno

_REFUSED = {errno.ECONNREFUSED}


def refused(exc: BaseException) -> bool:
    """True when `exc`, or an error it wraps (`os_error`, the cause or context), is a refused connection."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError) or (isinstance(e, OSError) and e.errno in _REFUSED):
            return True
        todo += [getattr(e, "os_error", None), e.__cause__, e.__context__]
    return False
