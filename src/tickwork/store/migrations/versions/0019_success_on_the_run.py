"""A run's successful last attempt is kept on the run's own row, not in tw_attempts (issue 22,
ADR 0033).

- tw_runs.finished_by: the worker whose outcome was applied last (NULL before this revision and
  for a run no outcome reached). With the start, finish, HTTP status, error, attempt number and
  fence the outcome writes on the run anyway, it is everything an attempt row holds.
- The outcome that ends a run in success appends no row to tw_attempts: that insert was one row
  and three index entries of every fire. Retries, failures, lost and cancelled attempts are
  recorded as before.
- tw_attempt_history: the view a reader asks for a run's attempts: tw_attempts, and for each
  succeeded run its last attempt from the run's row (id 0: not a stored row) unless tw_attempts
  holds it already (a run that succeeded before this revision).

Downgrading writes the successes the view derives into tw_attempts, so an older release lists
them as it always did.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

HISTORY_VIEW = """
CREATE VIEW tw_attempt_history AS
SELECT id, run_id, job_id, attempt, fence_token, worker, started_us, finished_us, status,
       http_status, error
FROM tw_attempts
UNION ALL
SELECT 0, r.id, r.job_id, r.attempt, r.fence_token, r.finished_by, r.started_us, r.finished_us,
       r.status, r.http_status, r.error
FROM tw_runs r
WHERE r.status = 'succeeded'
  AND NOT EXISTS (SELECT 1 FROM tw_attempts a
                  WHERE a.run_id = r.id AND a.attempt = r.attempt AND a.status = 'succeeded')
"""

WRITE_BACK = """
INSERT INTO tw_attempts (run_id, job_id, attempt, fence_token, worker, started_us, finished_us,
                         status, http_status, error)
SELECT run_id, job_id, attempt, fence_token, worker, started_us, finished_us, status,
       http_status, error
FROM tw_attempt_history WHERE id = 0
"""


def upgrade() -> None:
    op.execute("ALTER TABLE tw_runs ADD COLUMN finished_by TEXT")
    op.execute(HISTORY_VIEW)


def downgrade() -> None:
    op.execute(WRITE_BACK)
    op.execute("DROP VIEW tw_attempt_history")
    op.execute("ALTER TABLE tw_runs DROP COLUMN finished_by")
