"""JAX: 4 processes under jax.distributed.initialize on loopback (CPU devices, gloo collectives),
each fed its rank by croupier.jax.Feed, train one linear model data-parallel under jit.

Checks on content: every record of each epoch exactly once across the ranks and each rank's batches
the plan's (record ids), equal steps, the global arrays holding every rank's batch of the step, and
identical parameters on every process at the end (the gradients were reduced over the global
batch)."""
import collections
import os
import subprocess
import sys
import textwrap

import pytest

import croupier

from tf_records import write_regression_file
from workers import free_ports, read_outputs, run_all, write_script

pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")  # writes the TFRecord file

FEATURES = "id:int64,x:float32[4],y:float32"

_WORKER = textwrap.dedent("""
    import hashlib, json, sys
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_num_cpu_devices", int(sys.argv[5]))
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    address, out, process, processes, _, coordinator = sys.argv[1:7]
    jax.distributed.initialize(coordinator, num_processes=int(processes),
                               process_id=int(process), initialization_timeout=60)
    import croupier.jax

    feed = croupier.jax.Feed(address, "train", timeout=60)   # rank: jax.process_index()
    replicated = croupier.jax.NamedSharding(feed.sharding.mesh, croupier.jax.PartitionSpec())
    params = jax.device_put({"w": jnp.zeros((4,)), "b": jnp.zeros(())}, replicated)

    @jax.jit
    def train_step(params, batch):
        def loss_fn(p):
            return jnp.mean((batch["x"] @ p["w"] + p["b"] - batch["y"]) ** 2)
        loss, grads = jax.value_and_grad(loss_fn)(params)
        return jax.tree.map(lambda p, g: p - 0.02 * g, params, grads), loss

    batches, losses, global_ids = [], [], []
    for epoch in range(2):
        total = 0.0
        for batch, local in feed.local_epoch(epoch):
            params, loss = train_step(params, batch)
            batches.append(local["id"].tolist())
            total += float(loss)
            # The step's global batch, as every process sees it: each rank's part, in rank order.
            global_ids.append(multihost_utils.process_allgather(batch["id"], tiled=True).tolist())
        losses.append(total / len(feed))
    flat = np.concatenate([np.asarray(multihost_utils.process_allgather(v, tiled=True)).ravel()
                           for v in jax.tree.leaves(params)])
    json.dump({"process": jax.process_index(), "devices": len(jax.local_devices()),
               "shards": len(batch["x"].addressable_shards),
               "batches": batches, "global_ids": global_ids, "loss": losses,
               "params": flat.tolist(),
               "params_hash": hashlib.sha256(flat.tobytes()).hexdigest()}, open(out, "w"))
    feed.close()
    jax.distributed.shutdown()
""")


@pytest.mark.timeout(300)
def test_jax_distributed_4_processes_train_data_parallel_on_global_arrays(tmp_path):
    processes, local_devices, batch = 4, 2, 16
    records = 640  # per epoch: 4 ranks x 10 steps x 16 records
    path = write_regression_file(tf, tmp_path, records)
    script = write_script(tmp_path, "worker.py", _WORKER)
    with croupier.local_cluster(producers=2, work_dir=tmp_path / "cluster") as cluster:
        cluster.create_job("train", path, FEATURES, batch, consumers=processes, seed=7,
                           epochs=2)
        coordinator = f"127.0.0.1:{free_ports(1)[0]}"
        procs = []
        for i in range(processes):
            env = dict(os.environ, JAX_PLATFORMS="cpu", OMP_NUM_THREADS="1")
            for var in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "TF_CONFIG"):
                env.pop(var, None)  # the rank comes from JAX alone
            procs.append(subprocess.Popen(
                [sys.executable, str(script), cluster.address, str(tmp_path / f"out{i}.json"),
                 str(i), str(processes), str(local_devices), coordinator],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        run_all(procs, 240)
    outs = read_outputs((tmp_path / f"out{i}.json" for i in range(processes)), key="process")
    assert [o["process"] for o in outs] == list(range(processes))
    assert all(o["devices"] == local_devices and o["shards"] == local_devices for o in outs)
    steps = records // batch // processes
    for epoch in range(2):
        plan = croupier.EpochPlan(records, batch, processes, seed=7, epoch=epoch)
        assert plan.steps_per_consumer == steps
        seen = collections.Counter()
        for rank, o in enumerate(outs):
            assert len(o["batches"]) == 2 * steps, (rank, len(o["batches"]))  # equal steps
            for step in range(steps):
                got = o["batches"][epoch * steps + step]
                want = plan.batch(plan.global_batch(rank, step)).tolist()
                assert got == want, f"epoch {epoch} rank {rank} step {step}: not the plan's batch"
                seen.update(got)
        assert sorted(seen.elements()) == list(range(records)), f"epoch {epoch}: not exactly once"
    # Every process's global array of a step is the ranks' batches of that step, in rank order.
    for s in range(2 * steps):
        concatenated = [i for o in outs for i in o["batches"][s]]
        assert all(o["global_ids"][s] == concatenated for o in outs), f"step {s}"
    # Different data on each process, identical parameters: the gradient was the global batch's.
    assert len({o["params_hash"] for o in outs}) == 1, [o["params"] for o in outs]
    assert any(v != 0 for v in outs[0]["params"])
    assert outs[0]["loss"][1] < outs[0]["loss"][0]
