"""The seeded fault schedule: replayable, complete, and shaped so faults can be told apart."""

from __future__ import annotations

import itertools

import pytest
from bench.chaos.faults import FaultPlanConfig, plan_faults

LONG = FaultPlanConfig(duration_s=600, lease_ttl_s=5, short=False, external_queue=True)
SHORT_TABLE = FaultPlanConfig(duration_s=100, lease_ttl_s=5, short=True, external_queue=False)


def test_same_seed_same_schedule_other_seed_other_schedule() -> None:
    assert plan_faults(1, LONG) == plan_faults(1, LONG)
    assert plan_faults(1, LONG) != plan_faults(2, LONG)


def test_long_mode_has_every_fault_the_issue_names() -> None:
    kinds = [f.kind for f in plan_faults(5, LONG)]
    assert kinds.count("pg_crash") == 2
    for kind in ("stop_worker", "stop_scheduler", "queue_restart", "drop_connections", "net_cut"):
        assert kind in kinds
    kills = [k for k in kinds if k.startswith("kill")]
    assert len(kills) >= 600 // 25 - 3  # one every 20 +/- 5 s, minus room for the others


def test_short_table_mode_has_no_queue_server_to_restart() -> None:
    kinds = {f.kind for f in plan_faults(5, SHORT_TABLE)}
    assert "queue_restart" not in kinds
    assert {"pg_crash", "net_cut", "stop_worker", "drop_connections"} <= kinds
    assert kinds & {"kill_worker", "kill_scheduler"}


@pytest.mark.parametrize("seed", range(20))
def test_no_sigkill_lands_while_another_fault_is_in_force(seed: int) -> None:
    for config in (LONG, SHORT_TABLE):
        faults = plan_faults(seed, config)
        specials = [f for f in faults if not f.kind.startswith("kill")]
        for a, b in itertools.pairwise(specials):
            assert a.at_s + a.hold_s <= b.at_s, (a, b)
        for kill in (f for f in faults if f.kind.startswith("kill")):
            for s in specials:
                assert not (s.at_s - 2 <= kill.at_s <= s.at_s + s.hold_s + 2), (kill, s)
        quiet_from = config.duration_s - (15 if config.short else 30)
        assert all(f.at_s < quiet_from for f in faults)
