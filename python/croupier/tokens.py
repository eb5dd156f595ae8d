"""Language-model data: tokens jobs (docs/protocol.md, "Token jobs"; docs/python.md). The names
users call; their code is in the croupier.lm room.

A tokens job deals packed sequences of `sequence_length` tokens from Megatron-LM indexed datasets
(PREFIX.idx and PREFIX.bin), mixed by weight: `global_batch` sequences a global step, of which
each of the `consumers` ranks gets global_batch / consumers. What every sequence holds is decided
by the plan from the documents' lengths alone, so a run resumed at another number of ranks
continues with the same sequences, bit for bit.

IndexedDataset reads such a dataset, IndexedDatasetWriter and write_indexed_dataset write one
(`croupier tokenize` makes one from text: croupier.lm.corpus). create_token_job() defines a job
through a croupier.JobSpec; its settings are checked and completed by the dispatcher (C++), so
this module states none of their defaults: a 0 or "" is the dispatcher's default. Each batch
holds the int32 columns input_ids, labels, position_ids, segment_ids and loss_mask, of shape
[global_batch / consumers, sequence_length]. cu_seqlens() and attention_mask() derive what
attention kernels take from segment_ids.
"""
from croupier import _croupier
from croupier.lm.job import attention_mask, create_token_job, cu_seqlens, produce, resume_position
from croupier.lm.text import TextSource

write_indexed_dataset = _croupier.write_indexed_dataset
IndexedDataset = _croupier.IndexedDataset
IndexedDatasetWriter = _croupier.IndexedDatasetWriter

__all__ = ["IndexedDataset", "IndexedDatasetWriter", "TextSource", "attention_mask",
           "create_token_job", "cu_seqlens", "produce", "resume_position",
           "write_indexed_dataset"]
