"""The dispatcher's web page in headless Chromium, and the producers' own metrics, against a real
cluster: a dispatcher with --metrics-port, a producer with --metrics-port and a record cache, and
a consumer that reads slowly so that the figures move while the page is loaded twice.

Chromium (Debian's `chromium`) runs with --dump-dom after a --virtual-time-budget, so the page's
own JavaScript has fetched /api/status and /api/history and drawn them; each run is bounded by a
timeout and its process group is killed afterwards.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

from service_cluster import Cluster, run, wait_for_file

FEATURES = "id:int64,label:int64,image:bytes"


def chromium_binary():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("chromium is missing: scripts/debian-packages.txt lists it (apt-get install "
                "chromium)")


def chromium(url, profile, *mode, timeout=60):
    """Runs headless Chromium on `url` with `mode` (--dump-dom, --screenshot=...) and returns its
    stdout. Its whole process group is killed afterwards, whatever happened."""
    args = [chromium_binary(), "--headless", "--disable-gpu", "--no-sandbox",
            "--no-first-run", "--disable-extensions", "--disable-dev-shm-usage",
            f"--user-data-dir={profile}", "--virtual-time-budget=4000",
            "--window-size=1280,1500", *mode, url]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"chromium did not finish within {timeout} s on {url}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    if proc.returncode != 0:
        raise AssertionError(f"chromium exited {proc.returncode}:\n{err[-3000:]}")
    return out


def http_get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.headers["Content-Type"], r.read().decode()


def steps_in(dom):
    """The consumers' steps in the page's consumer table."""
    return [int(s) for s in re.findall(r'<td class="step">(\d+)</td>', dom)]


@pytest.fixture
def dataset(tmp_path):
    data = tmp_path / "data"
    run("synth", "--out", data, "--files", 3, "--records", 3000, "--image-bytes", 256, "--quiet")
    return sorted(data.glob("*.tfrecord"))


def test_the_web_page_shows_the_figures_and_they_move(tmp_path, dataset):
    web_port_file = tmp_path / "web.port"
    producer_port_file = tmp_path / "producer-metrics.port"
    with Cluster(tmp_path / "cluster",
                 dispatcher_args=["--metrics-port", "0", "--metrics-port-file",
                                  web_port_file]) as cluster:
        cluster.add_producer("--metrics-port", "0", "--metrics-port-file", producer_port_file,
                             "--cache-bytes", "64000000")
        # About 10 batches/s over 3 epochs of 187 steps: the consumer is still reading when the
        # page is loaded the second time, even on a slow machine (the cluster stops it after).
        cluster.create_job("web", dataset, FEATURES, 16, 1, seed=1, epochs=3)
        consumer = cluster.start_consumer("web", 0, 1, tmp_path / "rank0.jsonl", 3,
                                          "--slow-ms", "80", "--quiet")
        web = f"http://127.0.0.1:{int(wait_for_file(web_port_file, 10))}"
        producer_metrics = f"http://127.0.0.1:{int(wait_for_file(producer_port_file, 10))}/metrics"

        # The dispatcher measures the consumer's rate between heartbeats: wait for it.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            status = json.loads(http_get(f"{web}/api/status")[1])
            if status["consumers"] and status["consumers"][0]["batchesPerSecond"] > 0:
                break
            time.sleep(0.3)
        else:
            raise AssertionError(f"no consumer rate within 20 s: {status}")
        assert "producerAdvice" in status
        assert status["producers"][0]["stats"]["threads"] == 2
        # The same answer as `croupier status --json`, field for field.
        assert set(cluster.status()) == set(status)

        content_type, page = http_get(web + "/")
        assert content_type.startswith("text/html")
        assert "<svg id=\"chart-throughput\"" in page
        elsewhere = re.findall(r"(?:https?:)?//[\w.-]+\.\w+/?", page.replace(
            "http://www.w3.org/2000/svg", ""))
        assert not elsewhere, f"the page must load nothing from elsewhere: {elsewhere}"

        # The charts draw the history: wait until it holds two samples of the job (a loaded
        # machine can take longer than the rate above to record the second one).
        deadline = time.monotonic() + 20
        while True:
            samples = json.loads(http_get(web + "/api/history")[1])["samples"]
            if sum(1 for sample in samples if "web" in sample["jobs"]) >= 2:
                break
            assert time.monotonic() < deadline, f"the history has not two samples: {samples}"
            time.sleep(0.3)

        profile = tmp_path / "chromium-profile"
        first = chromium(web + "/", profile, "--dump-dom")
        time.sleep(2.5)
        second = chromium(web + "/", profile, "--dump-dom")
        screenshot = tmp_path / "web.png"
        chromium(web + "/", profile, f"--screenshot={screenshot}")
        print(f"screenshot of the web page: {screenshot}")

        _, producer_text = http_get(producer_metrics)
        assert consumer.poll() is None, "the consumer finished before the second load"

    for dom in (first, second):
        assert 'id="error"></span>' in dom, "the page could not reach the dispatcher"
        assert len(steps_in(dom)) == 1, dom[-3000:]
        # The charts are drawn: a line per job's throughput and the producers', with points.
        throughput = dom[dom.index('id="chart-throughput"'):dom.index('id="legend-throughput"')]
        assert throughput.count('class="series"') >= 2, throughput
        line = re.search(r'data-name="web"[^>]*points="([^"]*)"', throughput)
        assert line, throughput
        xs = {float(p.split(",")[0]) for p in line.group(1).split()}
        assert len(xs) >= 2, f"the samples of the history fall on one point: {line.group(1)}"
        assert re.search(r'<div class="big" id="throughput">\d+\.\d</div>', dom)
        assert re.search(r'<tr class="producer"><td>1</td><td class="l">127\.0\.0\.1:\d+</td>', dom)
    # The figures changed between the two loads.
    assert steps_in(second)[0] > steps_in(first)[0], (steps_in(first), steps_in(second))
    assert screenshot.stat().st_size > 10000

    # The producer's own metrics, scraped over HTTP.
    samples = dict(re.findall(r"^(croupier_producer_\w+)\{[^}]*\} (\S+)$", producer_text, re.M))
    assert float(samples["croupier_producer_batches_made_total"]) > 0
    assert float(samples["croupier_producer_cpu_seconds_total"]) > 0
    assert samples["croupier_producer_threads"] == "2"
    assert "# TYPE croupier_producer_cpu_seconds_total counter" in producer_text
    # Its record cache (--cache-bytes): the first epoch's records looked up, missed and admitted.
    cache = dict(re.findall(r"^(croupier_producer_cache_\w+) (\S+)$", producer_text, re.M))
    assert cache["croupier_producer_cache_capacity_bytes"] == "64000000", producer_text
    assert float(cache["croupier_producer_cache_misses_total"]) > 0, cache
    assert float(cache["croupier_producer_cache_records"]) > 0, cache
    assert "# TYPE croupier_producer_cache_hits_total counter" in producer_text
