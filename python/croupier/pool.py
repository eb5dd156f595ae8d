"""Kept path: croupier.map.pool holds the functions that docs/python.md names here."""
from croupier.map.pool import default_workers as default_workers, max_worker_deaths as max_worker_deaths  # noqa: F401,E501
