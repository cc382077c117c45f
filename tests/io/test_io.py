"""CSV and JSON round trips, atomic writes, and clear errors for bad files."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
import torch
from conftest import FakeCostModel, Work

import fxprof
from fxprof.io import atomic_write


@pytest.fixture
def prof(clock, fake_timer):
    return fxprof.profile(FakeCostModel(clock), torch.ones(2, 3), warmup=0, iters=4, timer=fake_timer, leaf_modules=[Work])


@pytest.fixture(scope="module")
def real_prof(resnet18):
    return fxprof.profile(resnet18, torch.randn(1, 3, 32, 32), warmup=1, iters=3)


@pytest.mark.parametrize("which", ["prof", "real_prof"])
def test_csv_round_trip_keeps_index_columns_dtypes_and_values(which, request, tmp_path):
    profile = request.getfixturevalue(which)
    path = tmp_path / "table.csv"
    profile.to_csv(path)
    back = fxprof.read_csv(path)
    pd.testing.assert_frame_equal(back, profile.df, check_exact=True)
    assert back.index.name == "node"


def test_csv_of_a_single_run_keeps_nan_spread(tmp_path, clock, fake_timer):
    one = fxprof.profile(FakeCostModel(clock), torch.ones(2, 3), warmup=0, iters=1, timer=fake_timer, leaf_modules=[Work])
    assert one.df["std_ms"].isna().all()
    one.to_csv(tmp_path / "one.csv")
    pd.testing.assert_frame_equal(fxprof.read_csv(tmp_path / "one.csv"), one.df)


def test_json_save_load_is_lossless(real_prof, tmp_path):
    path = tmp_path / "p.json"
    real_prof.save(path)
    back = fxprof.load(path)
    pd.testing.assert_frame_equal(back.samples, real_prof.samples, check_exact=True)
    pd.testing.assert_frame_equal(back.runs, real_prof.runs, check_exact=True)
    pd.testing.assert_frame_equal(back.df, real_prof.df, check_exact=True)
    assert back.nodes == real_prof.nodes
    assert back.meta == json.loads(json.dumps(real_prof.meta))
    assert back.summary() == real_prof.summary()
    data = json.loads(path.read_text())
    assert data["format"] == "fxprof.profile" and data["version"] == 2
    # columns of numbers; each sample's node is its position in "nodes"
    names = [n["name"] for n in data["nodes"]]
    assert [names[i] for i in data["samples"]["node"]] == real_prof.samples["node"].astype(str).tolist()
    assert "kernel_ms" not in data["samples"]  # not measured: left out, not a column of nulls


def test_version_1_json_still_loads_to_the_same_profile(real_prof, tmp_path):
    """A file written before version 2 (nodes by name, kernel_ms as nulls) loads to an equal profile."""
    path = tmp_path / "p.json"
    real_prof.save(path)
    data = json.loads(path.read_text())
    names = [n["name"] for n in data["nodes"]]
    data["version"] = 1
    data["samples"]["node"] = [names[i] for i in data["samples"]["node"]]
    data["samples"]["kernel_ms"] = [None] * len(names and data["samples"]["run"])
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data, allow_nan=False))
    back = fxprof.load(old)
    pd.testing.assert_frame_equal(back.samples, real_prof.samples, check_exact=True)
    pd.testing.assert_frame_equal(back.df, real_prof.df, check_exact=True)


@pytest.mark.parametrize("name", ["p.prof", "p.txt", "p.json.gz", "profile"])
def test_a_file_name_that_names_no_format_is_refused_before_writing(real_prof, tmp_path, name):
    with pytest.raises(ValueError, match=r"\.json.*\.npz"):
        real_prof.save(tmp_path / name)
    assert not (tmp_path / name).exists()
    real_prof.save(tmp_path / "P.JSON")  # the case of the extension does not matter
    assert fxprof.load(tmp_path / "P.JSON").num_runs == real_prof.num_runs


def test_unwritable_path_is_a_clear_error_and_loses_nothing(prof, tmp_path):
    with pytest.raises(fxprof.ProfileWriteError, match="cannot write .*still in memory"):
        prof.to_csv(tmp_path / "no" / "such" / "dir" / "t.csv")
    with pytest.raises(fxprof.ProfileWriteError, match="Is a directory"):
        prof.save(tmp_path)
    # the profile is intact and can be written elsewhere
    prof.to_csv(tmp_path / "ok.csv")
    assert fxprof.read_csv(tmp_path / "ok.csv").shape == prof.df.shape


def test_failed_write_leaves_the_old_file_whole(tmp_path):
    path = tmp_path / "keep.csv"
    path.write_text("old content\n")

    def broken(handle):
        handle.write("half a ta")
        raise OSError(28, "No space left on device")

    with pytest.raises(fxprof.ProfileWriteError, match="No space left"):
        atomic_write(path, broken)
    assert path.read_text() == "old content\n"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.csv"]  # no temporary file left


@pytest.mark.parametrize("content, message", [
    ("a,b\n1,2\n", "lacks the column\\(s\\) node, op"),
    ("", "not a CSV table"),
    ("\x00\x01\x02garbage", "lacks the column|not a CSV"),
])
def test_malformed_csv_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(fxprof.ProfileFormatError, match=message):
        fxprof.read_csv(path)


def test_csv_with_text_in_a_numeric_column(prof, tmp_path):
    path = tmp_path / "t.csv"
    prof.to_csv(path)
    header, first, *rest = path.read_text().splitlines()
    cells = first.split(",")
    cells[header.split(",").index("mean_ms")] = "fast"
    path.write_text("\n".join([header, ",".join(cells), *rest]) + "\n")
    with pytest.raises(fxprof.ProfileFormatError, match="non-numeric"):
        fxprof.read_csv(path)


@pytest.mark.parametrize("content, message", [
    ("{not json", "not JSON"),
    ('{"hello": 1}', 'no "format": "fxprof.profile"'),
    ('{"format": "fxprof.profile", "version": 99}', "version 99"),
    ('{"format": "fxprof.profile", "version": 1, "nodes": []}', "damaged"),
])
def test_malformed_saved_profile_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(fxprof.ProfileFormatError, match=message):
        fxprof.load(path)


def test_csv_given_to_load_says_which_reader_to_use(prof, tmp_path):
    prof.to_csv(tmp_path / "t.csv")
    with pytest.raises(fxprof.ProfileFormatError, match="read_csv|not JSON"):
        fxprof.load(tmp_path / "t.csv")


def test_written_files_get_ordinary_permissions(prof, tmp_path):
    umask = os.umask(0o022)
    try:
        prof.to_csv(tmp_path / "new.csv")
        assert (tmp_path / "new.csv").stat().st_mode & 0o777 == 0o644
        existing = tmp_path / "shared.json"
        existing.write_text("{}")
        existing.chmod(0o664)
        prof.save(existing)
        assert existing.stat().st_mode & 0o777 == 0o664
    finally:
        os.umask(umask)


OLD_CSV = os.path.join(os.path.dirname(os.path.dirname(__file__)), "golden", "table_before_scope_source.csv")


def test_own_csv_from_before_scope_source_and_calls_per_run_loads():
    """Issue 26 #13: written by fxprof 0.1.0 at commit d5b313c (before per-run statistics), a
    Sequential(Conv2d, ReLU, Flatten, Linear) at 1x3x8x8, 3 runs: it was refused ("lacks the
    column(s) scope_source, calls_per_run")."""
    table = fxprof.read_csv(OLD_CSV)
    from fxprof.core.profile import TABLE_COLUMNS

    assert list(table.columns) == list(TABLE_COLUMNS)
    assert table.shape[0] == 6 and table.index[0] == "input_1"
    assert table["calls_per_run"].tolist() == [1.0] * 6 and table["calls"].tolist() == [3] * 6
    assert (table["scope_source"] == "").all() and (table["phase"] == "forward").all()
    assert table.loc["_0", "median_ms"] == 0.016945 and table.loc["_0", "flops"] == 7776


def test_csv_node_that_never_ran_gets_zero_calls_per_run(tmp_path):
    lines = open(OLD_CSV).read().splitlines()
    header = lines[0].split(",")
    cells = lines[2].split(",")
    cells[header.index("calls")] = "0"
    (tmp_path / "t.csv").write_text("\n".join([lines[0], lines[1], ",".join(cells), *lines[3:]]) + "\n")
    assert fxprof.read_csv(tmp_path / "t.csv")["calls_per_run"].tolist() == [1.0, 0.0, 1.0, 1.0, 1.0, 1.0]


def test_csv_with_an_empty_node_name_is_refused(prof, tmp_path):
    """Issue 26 (lower harm): an empty node name in a CSV was accepted; JSON refuses it."""
    prof.to_csv(tmp_path / "t.csv")
    header, first, *rest = (tmp_path / "t.csv").read_text().splitlines()
    (tmp_path / "t.csv").write_text("\n".join([header, first, "," + rest[0].split(",", 1)[1], *rest[1:]]) + "\n")
    with pytest.raises(fxprof.ProfileFormatError, match="the node name on line 3 is empty"):
        fxprof.read_csv(tmp_path / "t.csv")


def _loaded_or_error(path):
    """What fxprof.load makes of a file: the profile's columns and table, or the error's words."""
    try:
        back = fxprof.load(path)
    except fxprof.ProfileFormatError as exc:
        return str(exc)
    return back.samples, back.runs, back.df, back.meta, back.nodes


def _same_outcome(left, right):
    if isinstance(left, str) or isinstance(right, str):
        assert left == right
        return
    for a, b in zip(left[:3], right[:3]):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert left[3:] == right[3:]


def _edit(text: bytes, column: bytes, old: bytes, new: bytes) -> bytes:
    """``text`` with the first ``old`` inside samples/runs column ``column`` (b'samples.node') replaced."""
    group, name = column.split(b".")
    start = text.index(b'"%s":[' % name, text.index(b'"%s":{' % group)) + len(name) + 4
    end = text.index(b"]", start)
    body = text[start:end]
    assert old in body, (column, old, body[:80])
    return text[:start] + body.replace(old, new, 1) + text[end:]


@pytest.mark.parametrize("edit", [
    "as saved",
    "leading zero", "negative run", "true in run", "float node", "exponent node", "huge node", "1e18 node",
    "empty item", "trailing comma", "null time", "null host", "string time", "true time",
    "meta has samples", "pretty printed", "duplicate column", "nested list", "no runs columns",
])
def test_json_columns_read_from_the_bytes_load_as_the_whole_document_parsed(prof, tmp_path, monkeypatch, edit):
    """The JSON loader reads a version 2 file's number columns straight from its bytes; a file of
    any other shape (or damaged) must load, or fail with the same words, as parsing the whole
    document does."""
    from fxprof.io import jsonfile

    path = tmp_path / "p.json"
    prof.save(path)
    text = path.read_bytes()
    assert jsonfile._parse_by_columns(text) is not None
    first_node = text[text.index(b'"samples":{"node":[') + 19:].split(b",")[0]
    text = {
        "as saved": lambda t: t,
        "leading zero": lambda t: _edit(t, b"samples.node", first_node, b"0" + first_node),
        "negative run": lambda t: _edit(t, b"samples.run", b"0", b"-1"),
        "true in run": lambda t: _edit(t, b"samples.run", b"1", b"true"),
        "float node": lambda t: _edit(t, b"samples.node", first_node, first_node + b".0"),
        "exponent node": lambda t: _edit(t, b"samples.node", first_node, first_node + b"e0"),
        "huge node": lambda t: _edit(t, b"samples.node", first_node, b"99999999999999999999"),
        "1e18 node": lambda t: _edit(t, b"samples.node", first_node, b"1000000000000000000"),
        "empty item": lambda t: _edit(t, b"samples.run", b",", b",,"),
        "trailing comma": lambda t: _edit(t, b"runs.run", b"0", b"0,"),
        "null time": lambda t: _edit(t, b"samples.time_ms", b",", b",null,"),
        "null host": lambda t: _edit(t, b"runs.host_ms", b",", b",null,"),
        "string time": lambda t: _edit(t, b"samples.time_ms", b",", b',"1",'),
        "true time": lambda t: _edit(t, b"samples.time_ms", b",", b",true,"),
        "meta has samples": lambda t: t.replace(b'"meta":{', b'"meta":{"samples":{"node":[0],"run":[0]},', 1),
        "pretty printed": lambda t: json.dumps(json.loads(t), indent=1).encode(),
        "duplicate column": lambda t: t.replace(b'"samples":{', b'"samples":{"node":[0],', 1),
        "nested list": lambda t: _edit(t, b"samples.node", first_node, b"[" + first_node + b"]"),
        "no runs columns": lambda t: t[:t.index(b'"runs":{') + 8] + t[t.index(b"}", t.index(b'"runs":{')):],
    }[edit](text)
    path.write_bytes(text)
    fast = _loaded_or_error(path)
    if edit == "as saved":
        assert not isinstance(fast, str)
    monkeypatch.setattr(jsonfile, "_parse_by_columns", lambda raw: None)
    _same_outcome(fast, _loaded_or_error(path))
