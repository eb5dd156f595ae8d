"""The short version of tests/chaos.py, inside `make test`: a 3-epoch job with 3 producers and 4
consumers while, on a seeded schedule, producers are SIGKILLed and restarted, frozen and thawed,
and the dispatcher is SIGKILLed and restarted. Every consumer's batches must match a fault-free
run exactly (exactly once, equal steps, bit-identical). The long version:
`.venv/bin/python tests/chaos.py --seconds N --seed S`.
"""
import pytest

import chaos

SECONDS, SEED = 22, 4


def test_schedule_is_a_function_of_the_seed_and_keeps_a_producer_untouched():
    events = chaos.schedule(SEED, SECONDS)
    assert events == chaos.schedule(SEED, SECONDS)
    assert events != chaos.schedule(SEED + 1, SECONDS)
    # This seed's short schedule exercises every kind of fault.
    assert {e.kind for e in events} == set(chaos.FAULTS)
    producers = [f"producer{i}" for i in range(chaos.PRODUCERS)]
    for e in events:
        t = e.start
        hit = {x.target for x in events if x.start <= t < x.start + x.duration}
        assert len([p for p in producers if p not in hit]) >= 1, (t, hit)


@pytest.mark.timeout(120)
def test_chaos_short_run_is_exactly_once_and_identical_to_a_fault_free_run(tmp_path):
    summary = chaos.chaos_run(tmp_path, SECONDS, SEED)
    chaos.print_summary(summary)
    assert sum(summary["faults"].values()) >= 5, summary
    assert summary["faults"].get("dispatcher_kill", 0) >= 1, summary
    assert summary["batches_verified"] == summary["records"] // chaos.BATCH * summary["epochs"]
