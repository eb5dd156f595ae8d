"""A job's life seen from Python and the command line: its state in the status, GetJob for one
job, a trainer told that its job is done, `croupier job list|describe|delete`, and the expiry of
done jobs (--job-retention). (A launch script run again in the same folder: test_deploy.py.)
Over the in-process cluster (croupier.testing); only the command line's check of --job-retention
starts a process. Each test bounds its time; the clusters stop everything they started."""
import json
import logging
import time

import pytest

import croupier
from croupier import errors
from croupier.testing import in_process_cluster
from service_cluster import run, synth_glob

FEATURES = "id:int64,label:int64,image:bytes"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """120 records over 2 files."""
    return synth_glob(tmp_path_factory.mktemp("data"), 120, files=2, image_bytes=16)


def summary(cluster, job):
    return next(j for j in cluster.status()["job_summaries"] if j["name"] == job)


@pytest.mark.timeout(90)
def test_a_read_job_is_done_and_its_next_trainer_is_warned(tmp_path, dataset):
    with in_process_cluster(producers=1, threads=1) as cluster:
        cluster.create_job("j", dataset, FEATURES, 10, consumers=1, epochs=1, seed=1)
        status = cluster.status()
        assert "jobs" not in status, "no file lists by default"
        # Code that looked for its job in status()["jobs"] hears why it is not there, instead of
        # finding an empty list (and waiting for its job forever).
        with pytest.raises(KeyError, match="only with job_info=True"):
            status["jobs"]
        assert summary(cluster, "j")["state"] == "idle"
        assert summary(cluster, "j")["num_files"] == 2
        with cluster.consumer("j", 0, 1) as feed:
            # Without the client lists, the same summaries, and the clients counted.
            full, brief = cluster.status(), cluster.status(clients=False)
            assert [len(full[k]) for k in ("producers", "consumers", "rank_positions")] == [1, 1, 1]
            assert (brief["num_producers"], brief["num_consumers"]) == (1, 1)
            assert (full["num_producers"], full["num_consumers"]) == (1, 1)
            assert [s["consumers"] for s in brief["job_summaries"]] == [1]
            with pytest.raises(KeyError, match="clients=False"):
                brief["consumers"]
            text = run("status", cluster.address, "--summary").stdout
            assert "1 jobs, 1 producers, 1 consumers" in text and "rank 0" not in text, text
            assert "rank 0" in run("status", cluster.address).stdout
            assert not feed.done_at_registration and feed.job.name == "j"
            assert sum(1 for _ in feed.batches(0)) == 12
        got = croupier.get_job(cluster.address, "j", auth_token=cluster.auth_token)
        assert isinstance(got, croupier.Job) and got.state == "done", got
        assert got.name == "j" and got.files and got.to_dict()["steps_per_epoch"] == 12
        assert croupier.Job.from_json(got.to_json()).files == got.files
        assert [rank for rank, _, _ in got.rank_positions] == [0]
        # A trainer that resumes the done job hears so, instead of reading nothing in silence.
        with cluster.consumer("j", 0, 1) as again:
            assert again.done_at_registration
            with pytest.warns(RuntimeWarning, match="job 'j' is done"):
                assert list(again.batches(0)) == []
        assert cluster.status(job_info=True)["jobs"][0]["files"], "whole JobInfos on request"


@pytest.mark.timeout(90)
def test_the_job_commands_list_describe_and_delete(tmp_path, dataset):
    with in_process_cluster(producers=1, threads=1) as cluster:
        cluster.create_job("a", dataset, FEATURES, 10, consumers=2, epochs=1)
        cluster.create_job("b", dataset, FEATURES, 10, consumers=1, epochs=0)
        listed = run("job", "list", "--dispatcher", cluster.address).stdout.splitlines()
        assert listed[0].startswith("job 'a': idle, tfrecord dealt, 0/2 consumers"), listed
        assert listed[1].startswith("job 'b': idle"), listed
        described = json.loads(run("job", "describe", "b", "--dispatcher", cluster.address,
                                   "--json").stdout)
        assert described["summary"]["state"] == "idle"
        feed = cluster.consumer("b", 0, 1)
        try:
            assert summary(cluster, "b")["state"] == "running"
            refused = run("job", "delete", "b", "--dispatcher", cluster.address, check=False)
            assert refused.returncode == 1
            assert "is read by consumer" in refused.stderr and "--force" in refused.stderr
            deleted = run("job", "delete", "b", "--force", "--dispatcher", cluster.address)
            assert "deleted job 'b'" in deleted.stdout and "1 consumers" in deleted.stdout
        finally:
            feed.close()
        with pytest.raises(errors.NotFoundError, match="b"):
            croupier.get_job(cluster.address, "b")
        croupier.delete_job(cluster.address, "a")
        assert run("job", "list", "--dispatcher", cluster.address).stdout == "no jobs\n"
        # The names are free again.
        cluster.create_job("a", dataset, FEATURES, 20, consumers=1, epochs=1)
        assert summary(cluster, "a")["steps_per_epoch"] == 6


@pytest.mark.timeout(60)
def test_a_done_job_expires_after_the_retention(tmp_path, dataset, caplog):
    bad = run("dispatcher", "--work-dir", tmp_path / "bad", "--job-retention", "3 days",
              check=False, timeout=20)
    assert bad.returncode == 2 and "--job-retention takes a positive duration" in bad.stderr
    with pytest.raises(ValueError, match="job_retention takes a positive number of seconds"):
        in_process_cluster(job_retention=0)
    caplog.set_level(logging.INFO, logger="croupier.native.dispatcher")
    with in_process_cluster(producers=1, job_retention=2) as cluster:
        cluster.create_job("short", dataset, FEATURES, 10, consumers=1, epochs=1)
        with cluster.consumer("short", 0, 1) as feed:
            assert sum(1 for _ in feed.batches(0)) == 12
        status = cluster.status()
        assert status["job_retention_seconds"] == 2
        assert summary(cluster, "short")["state"] == "done"
        done_at = time.monotonic()
        deadline = done_at + 20
        while cluster.status()["job_summaries"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cluster.status()["job_summaries"] == []
        # Kept for its retention (less the 0.1 s the status polls may lag), not deleted at once.
        assert time.monotonic() - done_at >= 1.5
        with pytest.raises(errors.NotFoundError):
            cluster.get_job("short")
        # The dispatcher's log line reaches Python's logging through croupier.logs' pipe.
        deadline = time.monotonic() + 5
        while (not any("deleted job 'short' (done for" in r.getMessage() for r in caplog.records)
               and time.monotonic() < deadline):
            time.sleep(0.05)
        assert any("deleted job 'short' (done for" in r.getMessage() for r in caplog.records)
