"""The stream's room: croupier.serve(), a Python iterable as the producer of a stream job.

source.py holds serve(): it creates the job (or reuses an identical one), registers this process
as one of the job's sources, and supplies, in order, the (epoch, batch) slots that its C++
producer node (a SequentialSource) asks for from the iterable, with the source's own state saved
and loaded at task boundaries (state_dir). The batches are laid out by croupier.columns, which
the map room shares.

What it may import (tests/test_imports.py holds it to this): its own modules, the extension
module, and the package's shared modules: croupier.errors, croupier.job, croupier.launcher,
croupier.client (the control-plane calls), croupier.columns, croupier.object_store and the
process helpers (croupier.runtime). Not croupier.map, not the adapters (croupier.torch, .tf, .jax, .ray), not the
local cluster or the consumer, and not the package's API in croupier/__init__.py. This file
imports nothing.
"""
