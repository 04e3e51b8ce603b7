"""tickwork: a distributed job scheduler."""
