"""Render an HTML page in headless Chromium at a width and measure its element boxes.

No browser driver: Chromium's `--dump-dom` prints the DOM after the page's scripts ran,
so a measuring script appended to a copy of the page writes what it found into the DOM
(`<pre id="layout-report">`), and the test reads it back. The flags are the ones this
machine's Chromium needs offline (no sandbox inside a container, no GPU, no network
services, a fresh profile).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)

# Every element box must stay inside the page; every SVG text inside its picture; no
# cell, caption, list item or paragraph may hold content wider than itself.
MEASURE = """
<script>
(() => {
  const vw = document.documentElement.clientWidth;
  const problems = [];
  const name = (el) =>
    el.tagName.toLowerCase() + ' "' + (el.textContent || '').trim().slice(0, 50) + '"';
  const page = document.documentElement.scrollWidth;
  if (page > vw) problems.push('the page scrolls sideways: ' + page + ' px > ' + vw + ' px');
  for (const el of document.body.querySelectorAll('*')) {
    const inside = el.closest('svg') && el.tagName.toLowerCase() !== 'svg';
    if (el.id === 'layout-report' || inside) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.right > vw + 0.5 || r.left < -0.5)
      problems.push('past the edge of the page: ' + name(el) + ' spans '
                    + Math.round(r.left) + '..' + Math.round(r.right));
  }
  for (const el of document.querySelectorAll('td, th, figcaption, li, p, h1, h2')) {
    if (el.scrollWidth > el.clientWidth + 1)
      problems.push('wider than its box: ' + name(el) + ' '
                    + el.scrollWidth + ' > ' + el.clientWidth);
  }
  let texts = 0;
  for (const svg of document.querySelectorAll('svg')) {
    const view = svg.viewBox.baseVal;
    for (const t of svg.querySelectorAll('text')) {
      texts += 1;
      const b = t.getBBox();
      if (b.x < view.x - 0.5 || b.y < view.y - 0.5 || b.x + b.width > view.x + view.width + 0.5
          || b.y + b.height > view.y + view.height + 0.5)
        problems.push('clipped by its picture: ' + name(t) + ' at ' + Math.round(b.x) + '..'
                      + Math.round(b.x + b.width) + ' of ' + view.width);
    }
  }
  const out = document.createElement('pre');
  out.id = 'layout-report';
  out.textContent = JSON.stringify({width: vw, problems: problems, svgTexts: texts,
                                    elements: document.body.querySelectorAll('*').length});
  document.body.appendChild(out);
})();
</script>
"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def measure(page: str, width: int, height: int = 1000) -> dict[str, Any]:
    """The layout problems Chromium finds in `page` at a `width`-pixel-wide window."""
    binary = chromium()
    assert binary is not None, "Chromium is not installed (.ci/run installs Debian's)"
    with tempfile.TemporaryDirectory(prefix="report-layout-") as work:
        target = Path(work) / "page.html"
        target.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
        done = subprocess.run(
            [
                binary,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={work}/profile",
                f"--window-size={width},{height}",
                "--dump-dom",
                target.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    found = re.search(r'<pre id="layout-report">(.*?)</pre>', done.stdout, re.S)
    assert found is not None, (
        f"Chromium printed no measurement (exit {done.returncode}): {done.stderr[-2000:]}"
    )
    measured: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return measured
