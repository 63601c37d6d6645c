"""``python -m framework.servers.schedule``: start the known-schedule streaming server (see the package)."""

from framework.servers.schedule.server import main

if __name__ == "__main__":
    raise SystemExit(main())
