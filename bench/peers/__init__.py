"""The peer suite: tickwork beside the schedulers a user would pick instead, in one run."""
