"""Kill a server's process group when the framework that started it is gone.

`python -m framework.execution.watchdog PARENT_PID PGID` polls its parent; once the parent is
gone (even by SIGKILL, which no handler can catch) it sends SIGTERM and then SIGKILL to the
group. It exits by itself once the group is gone. Deliberately tiny: no imports beyond the
standard library, so it starts in milliseconds.
"""

from __future__ import annotations

import os
import signal
import sys
import time

POLL_S = 0.2
GRACE_S = 5.0


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def main(argv: list[str]) -> int:
    parent, pgid = int(argv[0]), int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the framework's to handle
    while _group_alive(pgid):
        if os.getppid() != parent:
            try:
                os.killpg(pgid, signal.SIGTERM)
                deadline = time.monotonic() + GRACE_S
                while _group_alive(pgid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return 0
        time.sleep(POLL_S)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
