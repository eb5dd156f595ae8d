"""croupier.produce(source, dispatcher, spec): a map job's settings typed going in, as a
croupier.JobSpec (the way submit_job() takes a job), and only the producer's own settings as
keywords. The spec's unset settings are the plan's defaults, filled by the C++ library alone."""
import os
import sys
import threading

import pytest

import croupier
from croupier import errors
from croupier.testing import in_process_cluster

sys.path.insert(0, os.path.dirname(__file__))
import map_sources  # noqa: E402

RECORDS, WORLD = 40, 2


def produce_and_read(cluster, job, **keywords):
    """Runs produce(Records(RECORDS), job, **keywords) on a thread while WORLD ranks read epoch
    0; returns each rank's content hashes in step order."""
    running = threading.Thread(
        target=croupier.produce,
        args=(map_sources.Records(RECORDS), cluster.address, job),
        kwargs=dict(keywords, transform=map_sources.augment, workers=0, threads=2),
        daemon=True)
    running.start()
    name = job.name if isinstance(job, croupier.JobSpec) else job
    got = [[] for _ in range(WORLD)]

    def read(rank):
        feed = croupier.Consumer(cluster.address, name, rank, WORLD, timeout=30)
        got[rank] = [b.content_hash for b in feed.batches(0)]
        feed.close()
    readers = [threading.Thread(target=read, args=(r,), daemon=True) for r in range(WORLD)]
    for t in readers:
        t.start()
    for t in readers:
        t.join(60)
    running.join(60)
    assert not running.is_alive(), "produce() did not return once the epoch was read"
    return got


@pytest.mark.timeout(120)
def test_a_job_spec_deals_the_bytes_the_same_settings_as_keywords_deal():
    with in_process_cluster(producers=0) as cluster:
        by_keywords = produce_and_read(cluster, "k", batch_size=4, consumers=WORLD, epochs=1,
                                       seed=5, shuffle="blocks", block_size=8)
        spec = croupier.JobSpec(name="s", batch_size=4, num_consumers=WORLD, num_epochs=1,
                                seed=5, shuffle="blocks", block_size=8)
        by_spec = produce_and_read(cluster, spec)
        job = croupier.get_job(cluster.address, "s")
    assert by_spec == by_keywords
    assert len(by_spec[0]) == RECORDS // 4 // WORLD and len(set(by_spec[0] + by_spec[1])) == 10
    # Created from the spec: a map job of the source's records, its features read off batch 0,
    # the defaults the spec left unset filled by the dispatcher (window_blocks 16).
    assert job.source == "map" and job.num_records == RECORDS and job.features
    assert job.window_blocks == 16 and job.remainder == "drop"


@pytest.mark.parametrize("keywords, match", [
    ({"batch_size": 8}, "batch_size are the job's settings: set them in its JobSpec"),
    ({"consumers": 2, "epochs": 1}, "consumers, epochs are the job's settings"),
    ({"resume_from": {"epoch": 0}}, "resume_from: start_epoch and start_batch"),
    ({"options": croupier.ProduceOptions(batch_size=4)}, "no ProduceOptions goes with it"),
])
def test_a_job_setting_beside_a_spec_is_refused_naming_it(keywords, match):
    spec = croupier.JobSpec(name="s", batch_size=4, num_consumers=1)
    with pytest.raises(errors.InvalidArgumentError, match=match):
        croupier.produce(map_sources.Records(8), "127.0.0.1:1", spec, **keywords)


def test_a_spec_of_files_or_another_source_is_refused():
    for spec in (croupier.JobSpec(name="s", batch_size=4, files=["a.tfrecord"]),
                 croupier.JobSpec(name="s", batch_size=4, source="python")):
        with pytest.raises(errors.InvalidArgumentError, match="a map job's JobSpec names no files"):
            croupier.produce(map_sources.Records(8), "127.0.0.1:1", spec)
