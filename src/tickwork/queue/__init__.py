"""Durable queues between schedulers and workers (stage 2): one Protocol, several backends."""
