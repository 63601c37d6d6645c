"""Reading trials files: a crash-cut last line is dropped, damage elsewhere is an error."""

import pytest

from framework.errors import TrialsFileError
from framework.records.trials import read_json_object, read_trials


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


def test_a_directory_or_a_non_row_is_one_line_naming_the_file_and_line(tmp_path):
    import pytest

    from framework.errors import TrialsFileError
    from framework.records.trials import read_trials

    with pytest.raises(TrialsFileError, match="is a directory"):
        read_trials(tmp_path)
    p = tmp_path / "trials.jsonl"
    p.write_text('{"kind": "launch", "launch_id": "a"}\n[1, 2]\n{"kind": "launch", "launch_id": "b"}\n')
    with pytest.raises(TrialsFileError, match=r"trials.jsonl: line 2 is not a trial row"):
        read_trials(p)
    p.write_bytes(b'{"kind": "launch", "launch_id": "a"}\n\xff\xfe garbage\n{"kind": "launch", "launch_id": "b"}\n')
    with pytest.raises(TrialsFileError, match=r"line 2 is not valid JSON"):
        read_trials(p)
