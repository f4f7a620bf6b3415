"""Screenshots of the web planner's four tabs for the README (docs/img/web-*.png), taken in headless
Chromium from the system packages after a real estimate/plan, schedule simulation, serving plan and RL plan.

    .venv/bin/python scripts/web_screenshots.py [--out docs/img] [--chromium /usr/bin/chromium] [--phone]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import threading
import time
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

from shardwise.web.app import create_app

# (file, URL query, what to wait for): each a shareable link that runs its job on load.
SHOTS = [
    ("web-training.png", "tab=train&model=llama-3.1-70b&gpu=H100-SXM&gpus=512&seq_len=8192&global_batch=512&tokens=15e12&run=plan",
     "#train-selected canvas"),
    ("web-schedules.png", "tab=schedule&pp=4&microbatches=8&vpp=2&f=1&i=1&w=1&comm=0&schedules=1f1b,interleaved,zb-h1,zbv&run=simulate",
     "#sched-timelines canvas"),
    ("web-serving.png", "tab=serve&model=llama-3.1-8b&rate=20&gpus=h100:8,a100-80gb:8&slo_ttft_ms=300&slo_tpot_ms=50&run=plan",
     "#serve-cdfs .chart .main-svg"),
    ("web-rl.png", "tab=rl&example=rl-grpo-llama3.1-8b-64xh100&run=plan", "#rl-timeline .main-svg"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    ap.add_argument("--phone", action="store_true", help="also the estimate at phone width (390 x 844)")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}/?"
    shots = SHOTS + ([("web-phone.png", "tab=train&run=estimate", "#train-est-timeline canvas")] if args.phone else [])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        for name, query, ready in shots:
            size = {"width": 390, "height": 844} if name == "web-phone.png" else {"width": 1280, "height": 800}
            page = browser.new_page(viewport=size)
            page.goto(base + query)
            page.wait_for_selector(ready, timeout=300_000)
            time.sleep(1.0)  # let the charts settle
            page.screenshot(path=str(args.out / name), full_page=True)
            print(f"{args.out / name}")
            page.close()
        browser.close()
    server.should_exit = True


if __name__ == "__main__":
    main()
