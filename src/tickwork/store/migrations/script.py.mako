<%!
def q(value):
    # Revision ids are plain words: render them with the double quotes ruff format wants.
    return repr(value).replace("'", '"')
%>"""${message}

Instants are BIGINT microseconds since the Unix epoch in both dialects (ADR 0003). The script runs
inside one transaction under the migration lock (see tickwork/store/migrate.py); on SQLite,
ALTERs go through `with op.batch_alter_table(...)` (render_as_batch is on).

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401
${imports if imports else ""}
revision = ${q(up_revision)}
down_revision = ${q(down_revision)}
branch_labels = ${q(branch_labels)}
depends_on = ${q(depends_on)}


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
