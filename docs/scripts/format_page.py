"""Produces the real output quoted in docs/format.md: python docs/scripts/format_page.py (run in an empty folder)"""
import json, copy, torch, fxprof
from torch import nn

torch.manual_seed(0)
p = fxprof.profile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), torch.randn(2, 8), warmup=1, iters=3)
p.save("good.json")
good = json.load(open("good.json"))


def bad(name, edit=None, text=None):
    if text is None:
        doc = copy.deepcopy(good)
        edit(doc)
        text = json.dumps(doc)
    open(name, "w").write(text)
    try:
        fxprof.load(name)
    except fxprof.ProfileFormatError as exc:
        print(f"{name}: ProfileFormatError: {exc}")


bad("negative.json", lambda d: d["samples"]["time_ms"].__setitem__(0, -2.0))
bad("string.json", lambda d: d["samples"]["time_ms"].__setitem__(1, "5"))
bad("run999.json", lambda d: d["samples"]["run"].__setitem__(2, 999))
bad("inputs.json", lambda d: d["meta"].__setitem__("inputs", 5))
bad("infinity.json", text=json.dumps(good).replace('"time_ms": [', '"time_ms": [Infinity, ', 1))
bad("nested.json", text='{"format": "fxprof.profile", "version": 1, "meta": ' + "[" * 100000 + "]" * 100000 + "}")
p.to_csv("good.csv")
lines = open("good.csv").read().splitlines()
open("dup.csv", "w").write("\n".join(lines + [lines[1]]) + "\n")
header = lines[0].split(",")
cells = lines[1].split(",")
cells[header.index("calls")] = "1.5"
open("calls.csv", "w").write("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
for name in ("dup.csv", "calls.csv"):
    try:
        fxprof.read_csv(name)
    except fxprof.ProfileFormatError as exc:
        print(f"{name}: ProfileFormatError: {exc}")
bad("role.json", lambda d: d["nodes"][1].__setitem__("role", "bogus"))
bad("notes.json", lambda d: d["meta"].__setitem__("notes", "a note"))
bad("huge.json", lambda d: d["meta"].__setitem__("timed_wall_ms", 1e308))
open("cut.csv", "w").write("\n".join([*lines[:2], ",".join(lines[2].split(",")[:20])]))
try:
    fxprof.read_csv("cut.csv")
except fxprof.ProfileFormatError as exc:
    print(f"cut.csv: ProfileFormatError: {exc}")
p.meta["iters"] = "five"
try:
    p.save("five.json")
except fxprof.ProfileFormatError as exc:
    print(f"five.json: ProfileFormatError: {exc}")
