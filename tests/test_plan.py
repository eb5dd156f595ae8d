"""The epoch plan through the Python module: the deal's guarantees, checked on whole epochs."""
import collections

import numpy as np
import pytest

import croupier
from croupier import errors


def all_batches(plan):
    return [plan.batch(g) for g in range(plan.num_batches)]


@pytest.mark.parametrize("shuffle", ["none", "global", "blocks"])
@pytest.mark.parametrize("n,batch,consumers", [(1000, 7, 3), (4096, 64, 4), (10, 1, 10)])
def test_drop_deals_each_record_at_most_once_with_equal_steps(shuffle, n, batch, consumers):
    plan = croupier.EpochPlan(n, batch, consumers, seed=5, shuffle=shuffle, block_size=16,
                              window_blocks=4)
    ids = np.concatenate(all_batches(plan))
    assert len(ids) == len(set(ids.tolist()))
    assert len(ids) == (n // (batch * consumers)) * batch * consumers
    steps = collections.Counter(plan.consumer_of(g) for g in range(plan.num_batches))
    assert set(steps.values()) == {plan.steps_per_consumer}
    assert len(steps) == consumers


@pytest.mark.parametrize("shuffle", ["none", "global", "blocks"])
def test_pad_deals_every_record_at_least_once(shuffle):
    plan = croupier.EpochPlan(1000, 32, 3, seed=1, remainder="pad", shuffle=shuffle)
    ids = np.concatenate(all_batches(plan))
    assert set(ids.tolist()) == set(range(1000))
    assert plan.num_batches % 3 == 0


def test_same_inputs_same_plan_and_epochs_differ():
    a = croupier.EpochPlan(5000, 50, 4, seed=9, epoch=2)
    b = croupier.EpochPlan(5000, 50, 4, seed=9, epoch=2)
    c = croupier.EpochPlan(5000, 50, 4, seed=9, epoch=3)
    assert all(np.array_equal(x, y) for x, y in zip(all_batches(a), all_batches(b)))
    assert not np.array_equal(np.concatenate(all_batches(a)), np.concatenate(all_batches(c)))


def test_deal_is_round_robin():
    plan = croupier.EpochPlan(1000, 10, 4)
    for g in range(plan.num_batches):
        assert plan.consumer_of(g) == g % 4 and plan.step_of(g) == g // 4
        assert plan.global_batch(g % 4, g // 4) == g


def test_bad_settings_raise_invalid_argument_naming_them():
    with pytest.raises(errors.InvalidArgumentError, match="batch_size"):
        croupier.EpochPlan(100, 0, 2)
    with pytest.raises(errors.InvalidArgumentError, match="shuffle"):
        croupier.EpochPlan(100, 10, 2, shuffle="sideways")
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError too
        croupier.EpochPlan(10, 10, 2)  # drop would leave every epoch empty
    with pytest.raises(errors.OutOfRangeError):
        croupier.EpochPlan(100, 10, 2).batch(10)


@pytest.mark.parametrize("seed,epoch,index", [(0, 0, 0), (5, 1, 9), (2**32 - 1, 7, 2**32),
                                              (2**64 - 1, 2**63, 2**64 - 1), (2**70, 1, 2)])
def test_record_and_batch_generators_are_numpys_default_rng(seed, epoch, index):
    """record_rng and batch_rng seed their PCG64 from words computed in C++ (numpy's
    SeedSequence mixing, src/plan/seed_sequence.h): every draw, the spawned children and a pickled
    copy equal np.random.default_rng([seed, epoch, index, kind])'s (past 64 bits, numpy's own)."""
    import pickle
    for make, kind in ((croupier.record_rng, 0), (croupier.batch_rng, 1)):
        ours, numpys = make(seed, epoch, index), np.random.default_rng([seed, epoch, index, kind])
        assert ours.bit_generator.state == numpys.bit_generator.state
        assert (ours.random(8) == numpys.random(8)).all()
        assert (ours.integers(0, 1 << 40, 8) == numpys.integers(0, 1 << 40, 8)).all()
        for a, b in zip(ours.spawn(3), numpys.spawn(3)):
            assert (a.random(4) == b.random(4)).all()
        assert ours.bit_generator.seed_seq.entropy == numpys.bit_generator.seed_seq.entropy
        assert ours.bit_generator.seed_seq.n_children_spawned == 3
        again = pickle.loads(pickle.dumps(ours))
        assert (again.random(4) == numpys.random(4)).all()
        seq = ours.bit_generator.seed_seq
        assert (seq.generate_state(5) == np.random.SeedSequence(seq.entropy).generate_state(5)).all()
    with pytest.raises(ValueError):
        croupier.record_rng(1, 2, -1)
