"""Redraw docs/img/before_after_channels_last.png: execute notebook 02 headless and keep the picture
of its fused vs fused + channels_last ``plot_compare`` cell.

    python docs/scripts/before_after_figure.py [--out docs/img/before_after_channels_last.png]

The notebook runs in a Jupyter kernel of this interpreter (nbclient, ipykernel), this checkout
first on PYTHONPATH; the committed notebook is not changed. Prints the labels of the cell's
text output, if any, and where the picture went.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pathlib
import sys
import tempfile

import nbclient
import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "02_before_after.ipynb"
KERNEL = "fxprof-docs-python"
CELL = 'fxprof.plot_compare(fused_prof, cl_prof'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "docs" / "img" / "before_after_channels_last.png"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spec = pathlib.Path(tmp) / "kernels" / KERNEL
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": KERNEL, "language": "python"}))
        env = dict(os.environ, JUPYTER_PATH=tmp, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        env.pop("MPLBACKEND", None)
        os.environ["JUPYTER_PATH"] = tmp
        nb = nbformat.read(NOTEBOOK, as_version=4)
        nbclient.NotebookClient(nb, timeout=600, kernel_name=KERNEL,
                                resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute(env=env)
    cell = next(c for c in nb.cells if c.cell_type == "code" and CELL in c.source)
    image = next(o for o in cell.outputs if o.output_type == "display_data" and "image/png" in o.get("data", {}))
    out = pathlib.Path(args.out)
    out.write_bytes(base64.b64decode(image["data"]["image/png"]))
    print(f"picture: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
