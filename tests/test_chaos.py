"""The short version of tests/chaos.py, inside `make test`: a 3-epoch job with 3 producers and 4
consumers while, on a seeded schedule, producers are SIGKILLed and restarted, frozen and thawed,
the dispatcher is SIGKILLed and restarted, and consumers are SIGKILLed and restarted with their
rank from an exact checkpoint (the position after the last complete line of their output). Every
rank's batches must match a fault-free run exactly (exactly once, equal steps, bit-identical).
The long version: `.venv/bin/python tests/chaos.py --seconds N --seed S`.
"""
import json

import pytest

import chaos

SECONDS, SEED = 22, 2


def test_schedule_is_a_function_of_the_seed_and_keeps_a_producer_untouched():
    events = chaos.schedule(SEED, SECONDS)
    assert events == chaos.schedule(SEED, SECONDS)
    assert events != chaos.schedule(SEED + 1, SECONDS)
    # This seed's short schedule exercises every kind of fault, consumer restarts included, and
    # its first consumer fault comes early enough to land while every rank is still consuming.
    assert {e.kind for e in events} == set(chaos.FAULTS)
    assert min(e.start for e in events if e.kind == "consumer_kill") < SECONDS / 2
    producers = [f"producer{i}" for i in range(chaos.PRODUCERS)]
    for e in events:
        t = e.start
        hit = {x.target for x in events if x.start <= t < x.start + x.duration}
        assert len([p for p in producers if p not in hit]) >= 1, (t, hit)


def test_a_killed_consumers_checkpoint_is_the_batch_after_its_last_complete_line(tmp_path):
    out = tmp_path / "rank.jsonl"
    assert chaos.checkpoint_position(out, 5) == (0, 0, 0, 0)  # killed before its first batch
    line = lambda e, s: json.dumps({"epoch": e, "step": s, "hash": "x"}) + "\n"  # noqa: E731
    partial = '{"epoch": 0, "st'
    out.write_text(line(0, 0) + line(0, 1) + partial)
    assert chaos.checkpoint_position(out, 5) == (0, 2, 2, len(partial))
    assert out.read_text() == line(0, 0) + line(0, 1)  # the partial line is cut
    out.write_text("".join(line(0, s) for s in range(5)))
    assert chaos.checkpoint_position(out, 5) == (1, 0, 5, 0)  # the epoch's last step: next epoch
    with out.open("a") as f:
        f.write(line(1, 0))
    assert chaos.checkpoint_position(out, 5) == (1, 1, 6, 0)


@pytest.mark.long
@pytest.mark.timeout(120)
def test_chaos_short_run_is_exactly_once_and_identical_to_a_fault_free_run(tmp_path):
    summary = chaos.chaos_run(tmp_path, SECONDS, SEED)
    chaos.print_summary(summary)
    assert sum(summary["faults"].values()) >= 5, summary
    assert summary["faults"].get("dispatcher_kill", 0) >= 1, summary
    assert summary["faults"].get("consumer_kill", 0) >= 1, summary
    # Each restarted consumer resumed exactly where its output ended and wrote again.
    restarted = [c for c in summary["consumer_restarts"] if c["epoch"] < summary["epochs"]]
    assert restarted and all("kill_to_batch_s" in c for c in restarted), summary
    assert summary["batches_verified"] == summary["records"] // chaos.BATCH * summary["epochs"]
