"""Reading trials files: a crash-cut last line is dropped, damage elsewhere is an error."""

import pytest

from framework.records.trials import TrialsFileError, read_json_object, read_trials


def test_cut_last_line_is_dropped(tmp_path):
    path = tmp_path / "trials.jsonl"
    path.write_text('{"kind": "launch"}\n{"kind": "request"}\n{"kind": "req')
    assert read_trials(path) == [{"kind": "launch"}, {"kind": "request"}]


def test_damage_in_the_middle_raises(tmp_path):
    path = tmp_path / "trials.jsonl"
    path.write_text('{"kind": "launch"}\n{oops\n{"kind": "request"}\n')
    with pytest.raises(TrialsFileError, match="line 2"):
        read_trials(path)


def test_read_json_object(tmp_path):
    assert read_json_object(tmp_path / "missing.json") is None
    (tmp_path / "list.json").write_text("[1]")
    assert read_json_object(tmp_path / "list.json") is None
    (tmp_path / "ok.json").write_text('{"a": 1}')
    assert read_json_object(tmp_path / "ok.json") == {"a": 1}
