"""Issue 69, "Files are checked both ways": what a save writes, a load reads, and what a load
refuses, a save refuses first.

Each case was measured on main: old files read torch.gather as communication, roles outside the
vocabulary became their own group, saves wrote files their loader refused (or NaN as null, or
failed with a bare ValueError), 1e308 in meta printed a 300-digit figure, notes as a string
printed a line a character, a truncated CSV loaded as a shorter table, meta nested 500 deep
loaded and could not be saved, and an output path through a file blamed a missing folder.
"""

from __future__ import annotations

import copy
import json
import math
import os
import zipfile

import pandas as pd
import pytest
import torch
from torch import nn

import fxprof
from fxprof.core.nodes import NodeInfo
from fxprof.core.profile import Profile
from fxprof.io import write_csv
from fxprof.io.validate import MAX_META_DEPTH
from fxprof.vocab import ROLES


@pytest.fixture(scope="module")
def prof():
    torch.manual_seed(0)
    return fxprof.profile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), torch.randn(2, 8), iters=3, warmup=1)


def _same(a: Profile, b: Profile) -> None:
    """Two profiles hold the same: samples, runs, table, meta, nodes."""
    pd.testing.assert_frame_equal(a.samples, b.samples, check_exact=True)
    pd.testing.assert_frame_equal(a.runs, b.runs, check_exact=True)
    pd.testing.assert_frame_equal(a.df, b.df, check_exact=True)
    assert a.meta == b.meta
    assert a.nodes == b.nodes


def _round_trips(profile: Profile, folder, name: str = "good") -> None:
    for suffix in ("json", "npz"):
        path = folder / f"{name}.{suffix}"
        profile.save(path)
        _same(fxprof.load(path), profile)


def _edited_json(prof: Profile, folder, edit, name: str = "edited.json"):
    path = folder / name
    prof.save(path)
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    return path


def _edited_npz(prof: Profile, folder, edit, name: str = "edited.npz"):
    """A .npz profile whose header.json went through ``edit`` (the columns kept as written)."""
    good = folder / ("good-" + name)
    prof.save(good)
    path = folder / name
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "header.json":
                header = json.loads(data)
                edit(header)
                data = json.dumps(header).encode()
            dst.writestr(info.filename, data)
    return path


def _nothing_written(folder, name: str) -> None:
    assert not (folder / name).exists()
    assert not [p for p in os.listdir(folder) if p.startswith(".fxprof-")]  # no temporary file left either


# ------------------------------------------------------- roles of files from before roles
class Gathers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, index):
        y = torch.gather(self.fc(x), 1, index)
        return torch.scatter(y, 1, index, y)


def _without_roles(doc):
    for record in doc["nodes"]:
        del record["role"]


def test_an_old_file_reads_torch_gather_and_scatter_as_the_models_work_not_communication(tmp_path):
    x, index = torch.randn(4, 8), torch.zeros(4, 2, dtype=torch.int64)
    gathers = fxprof.profile(Gathers(), x, index, warmup=0, iters=2, anatomy=False, memory=False)
    assert {"gather", "scatter"} <= set(gathers.df["kind"])
    expected = [n.role for n in gathers.nodes]
    for path in (_edited_json(gathers, tmp_path, _without_roles), _edited_npz(gathers, tmp_path, _without_roles)):
        old = fxprof.load(path)
        assert [n.role for n in old.nodes] == expected, path
        assert set(old.df.loc[old.df["kind"].isin(["gather", "scatter"]), "role"]) == {"model"}
        assert "communication" not in old.group_by("comm").index
    csv = tmp_path / "old.csv"
    gathers.to_csv(csv)
    pd.read_csv(csv, dtype=str, keep_default_na=False).drop(columns="role").to_csv(csv, index=False)
    assert fxprof.read_csv(csv)["role"].tolist() == gathers.df["role"].tolist()


def test_an_old_file_still_reads_torch_distributed_collectives_as_communication(tmp_path):
    """Provenance, not the name: the same kind ``gather`` is a collective from torch.distributed."""
    nodes = [
        NodeInfo("x", "placeholder", "x", "", "", ""),
        NodeInfo("g", "call_function", "torch.gather", "", "", "", kind="gather"),
        NodeInfo("dg", "call_function", "torch.distributed.distributed_c10d.gather", "", "", "", kind="gather"),
        NodeInfo("ar", "call_function", "torch.ops._c10d_functional.all_reduce.default", "", "", "", kind="all_reduce"),
        NodeInfo("w", "call_function", "torch.ops._c10d_functional.wait_tensor.default", "", "", "", kind="wait_tensor"),
        NodeInfo("sc", "call_method", "scatter", "", "", "", kind="scatter"),
        NodeInfo("output", "output", "output", "", "", ""),
    ]
    samples = pd.DataFrame({"node": [n.name for n in nodes], "run": 0, "time_ms": 1.0, "host_ms": 1.0,
                            "start_ms": [float(i) for i in range(len(nodes))],
                            "host_start_ms": [float(i) for i in range(len(nodes))]})
    made = Profile(nodes, samples, pd.DataFrame({"run": [0], "total_ms": [10.0]}), {"device": "cpu"})
    old = fxprof.load(_edited_json(made, tmp_path, _without_roles))
    assert [n.role for n in old.nodes] == ["plumbing", "model", "collective", "collective", "collective", "model", "plumbing"]


# ------------------------------------------------------------ roles outside the vocabulary
def _set_role(value):
    def edit(doc):
        doc["nodes"][1]["role"] = value  # the Linear's row, node "_0"
    return edit


@pytest.mark.parametrize("value", ["bogus", "", 5, None, ["model"]])
@pytest.mark.parametrize("fmt", ["json", "npz"])
def test_a_role_outside_the_vocabulary_is_refused_on_load_naming_the_node_and_the_value(prof, tmp_path, value, fmt):
    assert prof.nodes[1].name == "_0" and prof.nodes[1].role == "model"
    path = (_edited_json if fmt == "json" else _edited_npz)(prof, tmp_path, _set_role(value))
    with pytest.raises(fxprof.ProfileFormatError) as caught:
        fxprof.load(path)
    message = str(caught.value)
    assert "node '_0' has the role" in message and repr(value) in message, message
    assert "not one of fxprof's roles" in message and all(role in message for role in ROLES)
    assert "delete it" in message  # what to do: the role is derived again without it
    _round_trips(prof, tmp_path)


def test_fsdp_on_a_linear_row_is_refused_as_inconsistent_with_its_kind(prof, tmp_path):
    """``fsdp`` is in the vocabulary, but a row of FSDP's steps has a step as its kind:
    fxprof.overlap would read the Linear as an FSDP step of kind ``linear``."""
    path = _edited_json(prof, tmp_path, _set_role("fsdp"))
    with pytest.raises(fxprof.ProfileFormatError, match=r"node '_0' has the role 'fsdp' but the kind 'linear'"):
        fxprof.load(path)


def test_a_csv_role_outside_the_vocabulary_is_refused_with_its_node_and_line(prof, tmp_path):
    path = tmp_path / "t.csv"
    prof.to_csv(path)
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    table.loc[1, "role"] = "bogus"
    table.to_csv(path, index=False)
    with pytest.raises(fxprof.ProfileFormatError, match=r"node '_0' \(line 3\) has the role 'bogus'"):
        fxprof.read_csv(path)


def test_a_role_outside_the_vocabulary_is_refused_before_saving(prof, tmp_path):
    import dataclasses

    bad = copy.deepcopy(prof)
    bad.nodes[1] = dataclasses.replace(bad.nodes[1], role="bogus")
    for name in ("r.json", "r.npz"):
        with pytest.raises(fxprof.ProfileFormatError, match=r"cannot save .*node '_0' has the role 'bogus'.*Nothing was written"):
            bad.save(tmp_path / name)
        _nothing_written(tmp_path, name)
    with pytest.raises(fxprof.ProfileFormatError, match=r"cannot write .*node '_0' has the role 'bogus'"):
        write_csv(bad.df.assign(role=["plumbing", "bogus", "model", "plumbing"]), tmp_path / "r.csv")
    _nothing_written(tmp_path, "r.csv")


# -------------------------------------------------------------- save checks what load checks
@pytest.mark.parametrize("key, value, words", [
    ("iters", "five", r"meta\.iters: 'five' is not of type 'integer'"),
    ("timed_wall_ms", math.nan, r"meta\.timed_wall_ms is nan, not a finite number"),
    ("own_runs_ms", [1.0, math.inf], r"meta\.own_runs_ms\[1\] is inf, not a finite number"),
    ("timed_wall_ms", 1e308, r"meta\.timed_wall_ms is 1e\+308 ms, beyond any measurement"),
    ("notes", "a note", r"meta\.notes: 'a note' is not of type 'array'.*'notes' holds list\[str\]"),
    ("notes", ["fine", 5], r"meta\.notes\[1\]: 5 is not of type 'string'"),
    ("epoch_ns", 2**70, r"meta\.epoch_ns is 1180591620717411303424, a whole number beyond int64"),
])
@pytest.mark.parametrize("suffix", ["json", "npz"])
def test_save_refuses_what_load_would_refuse_writes_nothing_and_keeps_the_profile(prof, tmp_path, key, value, words, suffix):
    bad = copy.deepcopy(prof)
    bad.meta[key] = value
    before = copy.deepcopy(bad.meta)
    samples = bad.samples.copy()
    name = f"bad.{suffix}"
    with pytest.raises(fxprof.ProfileFormatError, match=words) as caught:
        bad.save(tmp_path / name)
    message = str(caught.value)
    assert message.startswith(f"cannot save the profile to {str(tmp_path / name)!r}")
    assert "Nothing was written and the profile in memory is unchanged" in message
    assert f"correct or delete profile.meta[{key!r}], then save again" in message
    _nothing_written(tmp_path, name)
    # nothing measured is lost: the profile is as it was, and saves once the value is fixed
    assert json.dumps(bad.meta, default=str) == json.dumps(before, default=str)
    pd.testing.assert_frame_equal(bad.samples, samples)
    bad.meta[key] = prof.meta.get(key, 1) if key != "notes" else ["fine"]
    _round_trips(bad, tmp_path, "fixed")


def test_a_good_profile_round_trips_through_every_format(prof, tmp_path):
    _round_trips(prof, tmp_path)
    prof.to_csv(tmp_path / "t.csv")
    pd.testing.assert_frame_equal(fxprof.read_csv(tmp_path / "t.csv"), prof.df, check_exact=True)


def test_meta_as_a_save_writes_it_is_what_a_load_reads(prof, tmp_path):
    """Tuples become lists and numpy numbers numbers, the same in both formats, and load back."""
    import numpy as np

    odd = copy.deepcopy(prof)
    odd.meta["extra"] = {"pair": (1, 2), "ratio": np.float32(0.5), "count": np.int64(3)}
    for suffix in ("json", "npz"):
        odd.save(tmp_path / f"odd.{suffix}")
        assert fxprof.load(tmp_path / f"odd.{suffix}").meta["extra"] == {"pair": [1, 2], "ratio": 0.5, "count": 3}


# ------------------------------------------------------------------------ refused on load
@pytest.mark.parametrize("edit, words", [
    (lambda meta: meta.update(timed_wall_ms=1e308), r"meta\.timed_wall_ms is 1e\+308 ms, beyond any measurement \(at most 1e\+12 ms\)"),
    (lambda meta: meta["contention"].update(lost_ms=[1e300]), r"meta\.contention\.lost_ms\[0\] is 1e\+300 ms, beyond any measurement"),
    (lambda meta: meta.update(ratio=1e31), r"meta\.ratio is 1e\+31, beyond any measurement \(at most 1e\+30\)"),
    (lambda meta: meta.update(notes="abc"), r"meta\.notes: 'abc' is not of type 'array'"),
    (lambda meta: meta.update(notes=[["nested"]]), r"meta\.notes\[0\]: \['nested'\] is not of type 'string'"),
])
@pytest.mark.parametrize("fmt", ["json", "npz"])
def test_absurd_meta_numbers_and_notes_of_the_wrong_type_are_refused_on_load(prof, tmp_path, edit, words, fmt):
    base = copy.deepcopy(prof)
    base.meta.setdefault("contention", {"lost_ms": [0.0]})
    path = (_edited_json if fmt == "json" else _edited_npz)(base, tmp_path, lambda doc: edit(doc["meta"]))
    with pytest.raises(fxprof.ProfileFormatError, match=words) as caught:
        fxprof.load(path)
    assert "is a damaged fxprof profile" in str(caught.value)
    assert "The file was edited or damaged: correct or delete" in str(caught.value)


def test_show_refuses_a_file_with_an_absurd_meta_float_instead_of_printing_it(prof, tmp_path, capsys):
    """Measured: ``show`` printed a 300-digit figure and "inf%" for meta["timed_wall_ms"] = 1e308."""
    from fxprof.cli import main

    path = _edited_json(prof, tmp_path, lambda doc: doc["meta"].update(timed_wall_ms=1e308))
    code = main(["show", str(path)])
    out = capsys.readouterr()
    assert code != 0 and "inf%" not in out.out and "0" * 100 not in out.out
    assert "meta.timed_wall_ms is 1e+308 ms, beyond any measurement" in out.err


def test_notes_as_a_list_show_one_line_a_note(prof, tmp_path):
    noted = copy.deepcopy(prof)
    noted.meta["notes"] = ["first note", "second note"]
    _round_trips(noted, tmp_path)
    text = fxprof.load(tmp_path / "good.json").summary()
    assert [line for line in text.splitlines() if line.startswith("note:")] == ["note: first note", "note: second note"]


def _deep(levels: int):
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("fmt", ["json", "npz"])
def test_meta_nested_too_deep_is_refused_on_load_naming_the_key(prof, tmp_path, fmt):
    path = (_edited_json if fmt == "json" else _edited_npz)(prof, tmp_path, lambda doc: doc["meta"].update(deep=_deep(500)))
    with pytest.raises(fxprof.ProfileFormatError, match=rf"meta\.deep nests more than {MAX_META_DEPTH} levels deep"):
        fxprof.load(path)


def test_meta_nested_too_deep_is_refused_on_save_and_a_shallow_one_round_trips(prof, tmp_path):
    deep = copy.deepcopy(prof)
    deep.meta["deep"] = _deep(500)
    for name in ("deep.json", "deep.npz"):
        with pytest.raises(fxprof.ProfileFormatError, match=r"cannot save .*meta\.deep nests more than .* levels deep"):
            deep.save(tmp_path / name)
        _nothing_written(tmp_path, name)
    deep.meta["deep"] = _deep(MAX_META_DEPTH - 2)
    _round_trips(deep, tmp_path)


# ------------------------------------------------------------------------------ CSV cut short
@pytest.mark.parametrize("keep", [5, 20, 40])
def test_a_csv_cut_mid_row_is_refused_with_the_line(prof, tmp_path, keep):
    path = tmp_path / "t.csv"
    prof.to_csv(path)
    lines = path.read_text().splitlines()
    width = len(lines[0].split(","))
    cut = ",".join(lines[2].split(",")[:keep])  # the second row, cut off after `keep` cells
    path.write_text("\n".join([*lines[:2], cut]))
    with pytest.raises(fxprof.ProfileFormatError, match=rf"is cut short: line 3 has \d+ of the table's {width} cells"):
        fxprof.read_csv(path)
    path.write_text("\n".join(lines) + "\n")  # the whole file reads
    pd.testing.assert_frame_equal(fxprof.read_csv(path), prof.df, check_exact=True)


# --------------------------------------------------------------- output paths through a file
def test_an_output_path_through_a_file_names_the_file_not_a_missing_folder(prof, tmp_path, monkeypatch, capsys):
    from fxprof.cli import main

    (tmp_path / "afile").write_text("not a folder")
    (tmp_path / "models.py").write_text("from torch import nn\n\ndef small():\n    return nn.Sequential(nn.Linear(8, 4))\n")
    monkeypatch.chdir(tmp_path)
    code = main(["profile", "models.py:small", "--input", "2x8", "--json", "afile/x.json"])
    err = capsys.readouterr().err
    assert code != 0
    assert "is a file, not a folder" in err and "afile" in err and "does not exist" not in err
    code = main(["profile", "models.py:small", "--input", "2x8", "--json", "nodir/x.json"])
    err = capsys.readouterr().err
    assert code != 0 and "the folder" in err and "does not exist" in err and "mkdir -p" in err
    # from Python: the same cause, and the profile is still in hand
    with pytest.raises(fxprof.ProfileWriteError, match=r"afile' is a file, not a folder.*Nothing was lost"):
        prof.save("afile/sub/x.json")
    _round_trips(prof, tmp_path)
