"""Check the notebook display in a real browser: execute a notebook, render it, screenshot it.

    python docs/scripts/notebook_view.py [notebooks/03_custom_model_ranges.ipynb] [--width 1000]

1. Executes the notebook headless (nbclient, a kernel of this interpreter, this checkout first
   on PYTHONPATH); the committed notebook is not changed.
2. Keeps the cells whose output is an fxprof profile display (and the markdown cell before
   each) and converts them to HTML with nbconvert's JupyterLab template, so the page has
   JupyterLab's own CSS and output-area width.
3. Opens the page in headless Chromium (Debian package ``chromium``) at ``--width`` pixels:
   takes a screenshot (docs/img/notebook_view.png) and measures, in the browser, each
   fxprof table's width against the output area that holds it. Prints the measurements and
   exits 1 if a table is wider than its output area.

Needs ``pip install nbconvert nbclient ipykernel`` (the ``docs`` extra) and ``apt-get install chromium``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNEL = "fxprof-docs-python"

MEASURE = """
<script>
window.addEventListener('load', () => {
  const rows = [];
  document.querySelectorAll('.fxprof-profile').forEach((div, i) => {
    const table = div.querySelector('table');
    const area = div.closest('.jp-OutputArea-output') || div.parentElement;
    const heads = table ? [...table.querySelectorAll('thead th')].map(th => [th.textContent.trim(), getComputedStyle(th).textAlign]) : [];
    rows.push({display: i, table_px: table ? Math.ceil(table.getBoundingClientRect().width) : 0,
               area_px: Math.floor(area.getBoundingClientRect().width), headers: heads});
  });
  const pre = document.createElement('pre');
  pre.id = 'fxprof-measure';
  pre.textContent = JSON.stringify(rows);
  pre.style.display = 'none';
  document.body.appendChild(pre);
});
</script>
"""


def execute(path: pathlib.Path, workdir: pathlib.Path):
    import nbclient
    import nbformat

    spec = workdir / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fxprof docs", "language": "python",
    }))
    os.environ["JUPYTER_PATH"] = str(workdir)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name=KERNEL, resources={"metadata": {"path": str(path.parent)}})
    client.execute(env=env)
    return nb


def chromium(browser: str, flags: list[str], url: str, screenshot: pathlib.Path | None = None, timeout: float = 300) -> str:
    """Run headless Chromium once; return the DOM it dumps (or "" for a screenshot). Headless
    Chromium sometimes stays up after doing its job on a machine without a session bus, so it
    is stopped as soon as its output is complete."""
    env = {**os.environ, "DBUS_SESSION_BUS_ADDRESS": "disabled:"}
    args = [browser, *flags, f"--screenshot={screenshot}" if screenshot else "--dump-dom", url]
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.5)
                if screenshot is not None and screenshot.exists() and screenshot.stat().st_size > 0:
                    time.sleep(1.0)
                    break
                out.flush()
                out.seek(0)
                if screenshot is None and "</html>" in out.read():
                    break
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
        out.seek(0)
        return out.read()


def profile_cells(nb):
    """The cells that display a profile, each with the markdown cell just before it."""
    keep = []
    for i, cell in enumerate(nb.cells):
        html = "".join(o.get("data", {}).get("text/html", "") for o in cell.get("outputs", []) if isinstance(o.get("data", {}).get("text/html", ""), str))
        if cell.cell_type == "code" and "fxprof-profile" in html:
            if i and nb.cells[i - 1].cell_type == "markdown":
                keep.append(nb.cells[i - 1])
            keep.append(cell)
    nb.cells = keep
    return nb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook", nargs="?", default=str(ROOT / "notebooks" / "03_custom_model_ranges.ipynb"))
    parser.add_argument("--width", type=int, default=1000, help="browser window width in pixels (default: 1000)")
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--out", default=str(ROOT / "docs" / "img" / "notebook_view.png"))
    parser.add_argument("--executed", help="keep the executed notebook here, and reuse it if it exists")
    args = parser.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        print("needs Chromium: apt-get install chromium", file=sys.stderr)
        return 2
    from nbconvert import HTMLExporter

    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        import nbformat

        if args.executed and os.path.exists(args.executed):
            nb = nbformat.read(args.executed, as_version=4)
        else:
            nb = execute(pathlib.Path(args.notebook), work)
            if args.executed:
                nbformat.write(nb, args.executed)
        nb = profile_cells(nb)
        if not nb.cells:
            print("no cell of this notebook displays a profile", file=sys.stderr)
            return 2
        page, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
        page = page.replace("</body>", MEASURE + "</body>")
        html_path = work / "view.html"
        page = re.sub(r'<script[^>]*src="https?://[^"]*"[^>]*>\s*</script>', "", page)  # no network here
        html_path.write_text(page, encoding="utf-8")
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-zygote", "--disable-dev-shm-usage",
                 "--hide-scrollbars", f"--window-size={args.width},{args.height}"]
        out = pathlib.Path(args.out)
        out.unlink(missing_ok=True)
        chromium(browser, flags, html_path.as_uri(), screenshot=out)
        dom = chromium(browser, [*flags, "--virtual-time-budget=3000"], html_path.as_uri())
    found = re.search(r'<pre id="fxprof-measure"[^>]*>(.*?)</pre>', dom, re.S)
    if not found:
        print("the page did not report its measurements", file=sys.stderr)
        return 2
    rows = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    fits = True
    for row in rows:
        ok = row["table_px"] <= row["area_px"]
        fits &= ok
        heads = ", ".join(f"{name}:{align}" for name, align in row["headers"])
        print(f"display {row['display']}: table {row['table_px']} px in an output area of {row['area_px']} px "
              f"({'fits' if ok else 'TOO WIDE'}); headers {heads}")
    print(f"screenshot: {args.out} (window {args.width}x{args.height})")
    return 0 if fits else 1


if __name__ == "__main__":
    sys.exit(main())
