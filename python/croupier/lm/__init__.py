"""The language-model room: tokens jobs, whose public names croupier.tokens gives.

- job.py: create_token_job() (a JobSpec of kind tokens, checked and completed by the dispatcher),
  produce() (the producer of a job with text sources), resume_position(), and cu_seqlens() and
  attention_mask(), what attention kernels take from a batch's segment ids;
- text.py: TextSource, text that the job's own producers tokenize, its documents' lengths counted
  once and kept, and the Tokenizer a producer encodes a batch's documents with;
- corpus.py: `croupier tokenize`, text corpora to Megatron-LM indexed datasets, and the reading
  and encoding of documents that text.py shares, so that both give the same tokens.
Token datasets themselves are read and written in C++ (the extension's IndexedDataset and
IndexedDatasetWriter), and so are the plan's packed sequences.

What it may import (tests/test_imports.py holds it to this): its own modules, the extension
module and the package's shared modules (croupier.errors, croupier.job, croupier.launcher,
croupier.client, croupier.columns, croupier.object_store and croupier.runtime, whose serving.py runs a tokens producer
as it runs every producer of one job). Not croupier.map, not croupier.stream, not the adapters, not the local cluster or the consumer, and not the package's
API in croupier/__init__.py. This file imports nothing.
"""
