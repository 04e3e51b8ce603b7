"""Queues between schedulers and workers in separate processes: one Protocol, several backends.

A queue is transport; the schedule store stays the source of truth (see `base.py`).
"""
