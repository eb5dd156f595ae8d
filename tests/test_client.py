"""croupier.client without a dispatcher: status()'s dict, and the names croupier.cluster
re-exports."""
import pytest

import croupier
from croupier import client, cluster
from croupier.client import Status

ANSWER = {"job_summaries": [{"name": "train", "state": "idle"}], "producers": []}


def test_status_without_job_info_has_no_jobs_and_says_so():
    status = Status(ANSWER)
    assert "jobs" not in status
    # Code that waited for its job in status()["jobs"] (an empty list once) hears why it is not
    # there, whether it indexes or uses get() with a default.
    with pytest.raises(KeyError, match="only with job_info=True"):
        status["jobs"]
    with pytest.raises(KeyError, match="only with job_info=True"):
        status.get("jobs")
    with pytest.raises(KeyError, match="only with job_info=True"):
        status.get("jobs", [])
    assert status.get("job_summaries") == ANSWER["job_summaries"]
    assert status.get("not a key", 7) == 7
    with pytest.raises(KeyError, match="not a key"):
        status["not a key"]


def test_a_status_without_clients_has_no_client_lists_and_says_so():
    status = Status({"job_summaries": [], "num_producers": 2, "num_consumers": 5},
                    clients=False)
    for key in ("producers", "consumers", "rank_positions"):
        assert key not in status
        with pytest.raises(KeyError, match=f"'{key}': status.clients=False. lists no producer"):
            status[key]
        with pytest.raises(KeyError, match="num_consumers"):
            status.get(key, [])
    assert status["num_producers"] == 2 and status.get("num_consumers") == 5
    # With the lists asked for (the default), a key the answer lacks is an ordinary KeyError.
    with pytest.raises(KeyError, match="^'consumers'$"):
        Status({"job_summaries": []})["consumers"]


def test_status_with_job_info_holds_the_jobs():
    status = Status(dict(ANSWER, jobs=[]))
    assert status["jobs"] == [] and status.get("jobs") == []


def test_the_client_calls_are_importable_from_where_they_were():
    for name in ("create_job", "submit_job", "status", "get_job", "delete_job",
                 "auth_token_or_env", "Status"):
        assert getattr(cluster, name) is getattr(client, name), name
    for name in ("create_job", "submit_job", "status", "get_job", "delete_job"):
        assert getattr(croupier, name) is getattr(client, name), name


def test_a_jobs_old_dict_keys_say_what_to_write_instead():
    """The keys of the dicts get_job() and Consumer.job gave before they were a croupier.Job
    (docs/python.md, "Changed calls"): each KeyError names what to read now."""
    import json
    job = croupier.Job.from_json(json.dumps({
        "spec": {"name": "train", "batchSize": 1, "numConsumers": 1}, "numRecords": 4,
        "batchesPerEpoch": 4, "stepsPerEpoch": 4, "batchesPerTask": 1}))
    assert job["name"] == "train" and job["num_records"] == 4
    with pytest.raises(KeyError, match="returns the croupier.Job itself"):
        job["job"]
    with pytest.raises(KeyError, match=r"job.state.*job_summaries"):
        job["summary"]
    with pytest.raises(KeyError, match="feed.done_at_registration"):
        job["done_at_registration"]
    with pytest.raises(KeyError, match="^'nope'$"):
        job["nope"]
