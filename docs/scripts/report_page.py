"""Make the reports of docs/report.md and take their screenshots in headless Chromium.

    python docs/scripts/report_page.py [--out-dir docs/img] [--reports /tmp/fxprof-reports]

1. Profiles, on this machine's CPU, pinned to one thread: torchvision's resnet18 at 1x3x64x64
   (inference, 30 runs), the same model in channels_last (for a comparison), and a resnet18
   training step (SGD, 2x3x64x64, 8 runs); writes their reports and the comparison's.
2. Opens each report in headless Chromium (Debian package ``chromium``), 1280 pixels wide (a
   laptop), with every section but the one pictured hidden, and takes a screenshot of it:
   docs/img/report_*.png. Prints each report's size.

Needs ``pip install -e '.[report]'`` and ``apt-get install chromium``.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--virtual-time-budget=15000"]

#: (picture, report, sections shown, keep the header, window height)
SHOTS = [
    ("report_tree.png", "resnet18.html", ["tree"], True, 1000),
    ("report_distributions.png", "resnet18.html", ["dist", "runs"], False, 1130),
    ("report_table.png", "resnet18.html", ["table"], False, 700),
    ("report_training.png", "resnet18-train.html", ["tree", "phases"], True, 1080),
    ("report_compare.png", "compare.html", ["nodes"], True, 1180),
    ("report_blocks.png", "compare.html", ["blocks"], False, 980),
]


def profiles(reports: pathlib.Path) -> None:
    import torch
    import torchvision

    import fxprof

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    before = fxprof.profile(model, x, warmup=5, iters=30, name="resnet18")
    after = fxprof.profile(model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last),
                           warmup=5, iters=30, name="resnet18 channels_last")
    model.to(memory_format=torch.contiguous_format)
    before.to_html(reports / "resnet18.html")
    fxprof.show_report(before, after, label_a="resnet18", label_b="channels_last").save(reports / "compare.html")
    train = torchvision.models.resnet18(weights=None).train()
    step = fxprof.profile(train, torch.randn(2, 3, 64, 64), backward=True, optimizer=torch.optim.SGD(train.parameters(), lr=0.01),
                          warmup=2, iters=8, name="resnet18 training step")
    step.to_html(reports / "resnet18-train.html")
    for name in ("resnet18.html", "compare.html", "resnet18-train.html"):
        print(f"{name}: {(reports / name).stat().st_size / 1e6:.1f} MB")


def screenshot(chromium: str, page: pathlib.Path, out: pathlib.Path, sections: list[str], header: bool, height: int) -> None:
    hide = "section{display:none}" + "".join(f"section#{s}{{display:block}}" for s in sections)
    if not header:
        hide += "header{display:none}.cards{display:none}"
    with tempfile.TemporaryDirectory() as tmp:
        shown = pathlib.Path(tmp) / page.name
        shown.write_text(page.read_text().replace("</head>", f"<style>{hide}</style></head>", 1))
        subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp}/profile", f"--window-size=1280,{height}",
                        f"--screenshot={out}", shown.as_uri()], check=True, capture_output=True, timeout=180)
    print(f"screenshot: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} (1280x{height})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", default=str(ROOT / "docs" / "img"))
    parser.add_argument("--reports", default=None, help="where the reports are written (default: a temporary folder)")
    parser.add_argument("--shots-only", action="store_true", help="reuse the reports in --reports")
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        print("needs Chromium: apt-get install chromium", file=sys.stderr)
        return 2
    reports = pathlib.Path(args.reports or tempfile.mkdtemp(prefix="fxprof-reports-"))
    reports.mkdir(parents=True, exist_ok=True)
    if not args.shots_only:
        profiles(reports)
    out_dir = pathlib.Path(args.out_dir)
    for name, page, sections, header, height in SHOTS:
        screenshot(chromium, reports / page, out_dir / name, sections, header, height)
    return 0


if __name__ == "__main__":
    sys.exit(main())
