"""Kept path: croupier.map.pipeline holds the Pipeline that docs/python.md names here."""
from croupier.map.pipeline import Pipeline as Pipeline, batch_rng as batch_rng, record_rng as record_rng  # noqa: F401,E501
