"""Kept path: croupier.map.tf_pipeline holds the record_seed that docs/tensorflow.md names here."""
from croupier.map.tf_pipeline import record_seed as record_seed  # noqa: F401
