"""The map producer's room: what makes and serves a map job's batches, croupier.produce().

A map job's records come from a Python source read by index (a Dataset's __getitem__). Its
producer is produce() (producer.py, with ProduceOptions), which creates the job, starts the worker
pool and the C++ producer node, and serves until the job ends. Inside:
- pipeline.py: the transform chain (read, decode, transform, collate) that makes a batch from
  record indexes, with rng.py (the records' and batches' seeded generators), spec.py (the
  feature spec checked against the batches) and record_threads.py (per-record work on threads);
- tf_pipeline.py and tf_feed.py: tf_transform, a tf.data pipeline as the per-record transform;
- pool.py and zygote.py: the worker processes (forks of a zygote) and their supervisor;
- record_cache.py, record_file.py and cache_dirs.py: the record cache on /dev/shm, and there
  the copies through which the workers fetch each range of an object once for all.

What it may import (tests/test_imports.py holds it to this): its own modules, the extension
module, and the package's shared modules: croupier.errors, croupier.job, croupier.launcher,
croupier.client (the control-plane calls), croupier.columns (a batch as columns, which serve()
shares), croupier.object_store (S3 reads and their counters) and the process helpers
(croupier.runtime). Not croupier.stream, not the adapters
(croupier.torch, .tf, .jax, .ray), not the local cluster or the consumer, and not the package's
API in croupier/__init__.py. This file imports nothing, so that importing one module of the room
loads only what that module needs.

Paths users had before the room (docs/python.md, docs/tensorflow.md) still import, as one-line
modules that re-export what the docs show: croupier.pipeline (Pipeline, record_rng, batch_rng),
croupier.pool (default_workers, max_worker_deaths) and croupier.tf_pipeline (record_seed). The
loggers keep their names: croupier.pipeline and croupier.record_cache.
"""
