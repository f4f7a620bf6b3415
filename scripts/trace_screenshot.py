"""Open a Chrome/Perfetto trace in the Chrome trace viewer, offline, and save a screenshot.

    python scripts/trace_screenshot.py TRACE.json OUT.png --catapult /path/to/catapult [--chromium chromium]

ui.perfetto.dev cannot be reached from every machine, so this uses the trace viewer that chrome://tracing
was built from (catapult's ``tracing`` project, https://github.com/catapult-project/catapult): its
``tracing/bin/trace2html`` embeds the JSON in a standalone page, and headless Chromium renders it. The
browser is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON messages
ended by NUL on file descriptors 3 and 4), so nothing beyond Chromium and the Python standard library is
needed. Prints what the viewer's model holds (processes, threads, slices) and exits non-zero if the page
never finished importing the trace.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: JavaScript returning the imported model's shape once the viewer is ready, else null
PROBE = """(() => {
  const view = document.querySelector('tr-ui-timeline-view');
  const model = view && view.model;
  if (!model || document.querySelector('tr-ui-b-overlay[visible]')) return null;
  const procs = Object.values(model.processes);
  let slices = 0, threads = 0, counters = 0;
  for (const p of procs) {
    counters += Object.keys(p.counters).length;
    for (const t of Object.values(p.threads)) { threads += 1; slices += t.sliceGroup.length; }
  }
  return JSON.stringify({processes: procs.map(p => p.name), threads, slices, counters,
                         flows: model.flowEvents.length});
})()"""


class DevTools:
    """The DevTools protocol over ``--remote-debugging-pipe``."""

    def __init__(self, chromium: str, size: tuple[int, int]):
        to_browser_r, self._w = os.pipe()
        self._r, from_browser_w = os.pipe()

        def pipes_on_3_and_4():  # in the child, before exec; os.pipe's own ends close at exec
            a, b = os.dup(to_browser_r), os.dup(from_browser_w)  # above every open descriptor
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--remote-debugging-pipe",
             f"--window-size={size[0]},{size[1]}", "about:blank"],
            close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=pipes_on_3_and_4)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next, self._buf = 0, b""

    def call(self, method: str, session: str | None = None, **params: object) -> dict:
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self._buf:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--catapult", type=Path, required=True, help="a checkout of catapult-project/catapult")
    ap.add_argument("--chromium", default="chromium")
    ap.add_argument("--size", default="1600x900", help="window WIDTHxHEIGHT")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the import")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "trace.html"
        subprocess.run([sys.executable, str(args.catapult.resolve() / "tracing/bin/trace2html"), args.trace.name,
                        "--output", str(page)], check=True, stdout=subprocess.DEVNULL, cwd=args.trace.parent)
        width, height = (int(x) for x in args.size.split("x"))
        dt = DevTools(args.chromium, (width, height))
        try:
            target = dt.call("Target.createTarget", url=page.as_uri())["targetId"]
            session = dt.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            dt.call("Emulation.setDeviceMetricsOverride", session, width=width, height=height,
                    deviceScaleFactor=1, mobile=False)
            deadline, shape = time.monotonic() + args.timeout, None
            while time.monotonic() < deadline and shape is None:
                time.sleep(1.0)
                shape = dt.call("Runtime.evaluate", session, expression=PROBE, returnByValue=True)["result"].get("value")
            if shape is None:
                print(f"the trace viewer did not finish importing {args.trace} in {args.timeout:.0f} s", file=sys.stderr)
                return 1
            time.sleep(2.0)  # let the timeline draw
            # down to the analysis panel (it stays empty: nothing is selected)
            panel = dt.call("Runtime.evaluate", session, returnByValue=True, expression=(
                "(() => { const a = document.querySelector('tr-ui-a-analysis-view');"
                " return a ? a.getBoundingClientRect().top : null; })()"))["result"].get("value")
            clip = {"x": 0, "y": 0, "width": width, "height": panel or height, "scale": 1}
            png = dt.call("Page.captureScreenshot", session, format="png", clip=clip)["data"]
        finally:
            dt.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(base64.b64decode(png))
    print(f"trace viewer model: {shape}")
    print(f"screenshot written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
