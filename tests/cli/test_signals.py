"""A stop signal whose exception was swallowed on the way still ends the command as stopped."""

from __future__ import annotations

import signal
import types

import pytest

import framework.cli as cli
from framework.execution import launcher


@pytest.fixture
def finished_command(monkeypatch):
    """`validate` replaced by a command that ends normally (exit 0), as a run whose signal was swallowed would."""
    real = cli.importlib.import_module

    def fake(name: str, *args, **kwargs):
        if name == "framework.cli.validate":
            return types.SimpleNamespace(main=lambda rest: 0)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(cli.importlib, "import_module", fake)


@pytest.mark.parametrize("signum,code,line", [(signal.SIGTERM, 143, "terminated by SIGTERM"),
                                              (signal.SIGHUP, 129, "terminated by SIGHUP")])
def test_a_swallowed_termination_still_exits_with_its_code(finished_command, monkeypatch, capsys, signum, code, line):
    monkeypatch.setattr(launcher, "_RECEIVED", [signum])
    with pytest.raises(SystemExit) as exc:
        cli.main(["validate"])
    assert exc.value.code == code
    assert line in capsys.readouterr().err


def test_a_swallowed_interrupt_still_exits_130(finished_command, monkeypatch, capsys):
    monkeypatch.setattr(launcher, "_RECEIVED", [signal.SIGINT])
    assert cli.main(["validate"]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_without_a_signal_the_code_is_the_commands(finished_command, monkeypatch):
    monkeypatch.setattr(launcher, "_RECEIVED", [])
    assert cli.main(["validate"]) == 0


def test_the_handlers_remember_the_signal_they_turned_into_an_exception(monkeypatch):
    monkeypatch.setattr(launcher, "_RECEIVED", [])
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        launcher.install_signal_handlers()
        with pytest.raises(SystemExit) as exc:
            signal.raise_signal(signal.SIGTERM)
        assert exc.value.code == 143 and launcher.received_signal() == signal.SIGTERM
        with pytest.raises(SystemExit):  # raised again at the next check, though the first was caught
            launcher.raise_if_signalled()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
