"""The dashboard in a real browser: notebooks/03-watching-the-engine.ipynb served by voila on 127.0.0.1
(token off) and opened in Debian's chromium driven by Playwright. The page must show the arrangement
table with the expected arrangements and a rendered latency CCDF image, and a value in the table must
change while the page is open (the notebook keeps its workload going for ``KPGNB_DEMO_LIVE`` seconds
under voila). A screenshot is saved under tests/artifacts/.

Skips, saying why, only when chromium (``/usr/bin/chromium``: ``apt-get install chromium``; Playwright's
own browser download does not work here), Playwright or voila cannot be had. ``.ci/run`` installs
chromium where it is missing."""
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "03-watching-the-engine.ipynb"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = os.environ.get("KPGNB_CHROMIUM", "/usr/bin/chromium")
LIVE_S = 60          # how long the notebook keeps its workload going under voila (the page's lifetime)
START_S = 120        # voila executing the notebook, the page rendering its widgets (a cold numba cache too)
NAMES = ("edges_by_src", "input:edges", "input:roots")


def _requirements():
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium; .ci/run does this as root)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    if importlib.util.find_spec("voila") is None:
        pytest.skip("voila is not installed (pip install -e '.[test]')")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc, log: Path, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"voila exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"voila did not listen on port {port} within {timeout} s:\n{log.read_text()[-4000:]}")


@pytest.fixture
def voila_url(tmp_path):
    _requirements()
    port = _free_port()
    env = dict(os.environ, KPGNB_DEMO_LIVE=str(LIVE_S), KPGNB_WORKERS=os.environ.get("KPGNB_WORKERS", "2"),
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    log = tmp_path / "voila.log"
    cmd = [sys.executable, "-m", "voila", str(NOTEBOOK), "--no-browser", "--Voila.ip=127.0.0.1",
           f"--port={port}", "--Voila.port_retries=0", "--ServerApp.token=", "--Voila.token=",
           "--show_tracebacks=True", f"--Voila.root_dir={ROOT / 'notebooks'}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT / "notebooks", env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        _wait_listening(port, proc, log, 60)
        yield f"http://127.0.0.1:{port}/", log
    finally:
        proc.terminate()  # voila shuts its kernel down
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        try:  # whatever it left behind in its own session (a kernel it could not stop)
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# The arrangement tables on the page (the dashboard's and the one shown alone): for each row, the text of
# its cells, keyed by the column titles.
READ_TABLES = """() => {
  const out = [];
  for (const t of document.querySelectorAll('table.kpgnb-t')) {
    const heads = [...t.querySelectorAll('th')].map(th => th.innerText.trim());
    if (!heads.includes('arrangement')) continue;
    for (const tr of t.querySelectorAll('tr')) {
      const cells = [...tr.querySelectorAll('td')].map(td => td.innerText.trim());
      if (cells.length === heads.length) out.push(Object.fromEntries(heads.map((h, i) => [h, cells[i]])));
    }
  }
  return out;
}"""

# Images the ipywidgets Image views rendered, with a non-empty src that has loaded (naturalWidth > 0).
READ_IMAGES = """() => [...document.querySelectorAll('img')]
  .filter(i => i.getAttribute('src') && i.complete && i.naturalWidth > 0)
  .map(i => ({src: i.getAttribute('src').slice(0, 40), w: i.naturalWidth, h: i.naturalHeight}))"""


def test_dashboard_in_a_real_browser(voila_url):
    from playwright.sync_api import sync_playwright

    url, log = voila_url
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url, timeout=START_S * 1000, wait_until="domcontentloaded")

            def rows():
                return {r["arrangement"]: r for r in page.evaluate(READ_TABLES)}

            # the arrangement table with the expected names, and a rendered CCDF image
            deadline = time.monotonic() + START_S
            while not (set(NAMES) <= set(rows()) and page.evaluate(READ_IMAGES)):
                if time.monotonic() > deadline:
                    page.screenshot(path=str(shot), full_page=True)
                    raise AssertionError(f"no arrangement table naming {NAMES} and no rendered image within "
                                         f"{START_S} s; page errors: {errors}; tables: {rows()}; "
                                         f"voila log:\n{log.read_text()[-3000:]}")
                page.wait_for_timeout(250)
            images = page.evaluate(READ_IMAGES)
            assert any(i["w"] >= 200 and i["h"] >= 150 for i in images), images  # the plots, not icons
            text = page.evaluate("() => document.body.innerText")
            assert re.search(r"kpgnb engine · \d+ workers · 2 dataflows running", text), text[:2000]
            edges = rows()["edges_by_src"]
            assert edges["dataflow"] == "bfs" and edges["kind"] == "export" and edges["key"] == "src", edges

            # the workload keeps going: the table follows it while the page is open
            first = edges["upper"]
            assert re.fullmatch(r"\{?\(?\d+\)?\}?", first.replace(" ", "")), first
            deadline = time.monotonic() + 30
            while rows()["edges_by_src"]["upper"] == first:
                if time.monotonic() > deadline:
                    page.screenshot(path=str(shot), full_page=True)
                    raise AssertionError(f"edges_by_src's upper stayed {first} for 30 s with the page open")
                page.wait_for_timeout(250)
            later = rows()["edges_by_src"]
            assert _epoch(later["upper"]) > _epoch(first), (first, later["upper"])
            page.screenshot(path=str(shot), full_page=True)
            assert not errors, errors
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000


def _epoch(frontier: str) -> int:
    return int(re.search(r"\d+", frontier).group())
