"""The database: engine set-up for SQLite (default) or PostgreSQL, and migrations."""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).with_name("migrations")
DEFAULT_URL = "sqlite:///privtd.db"


def connect(url: str = DEFAULT_URL) -> sa.Engine:
    """An engine for ``url`` (``sqlite:///FILE`` or ``postgresql://...``), schema migrated to
    the newest revision."""
    if url.startswith("postgresql://"):
        # psycopg 3 is the driver the ``service`` extra installs.
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    if url.startswith("sqlite"):
        # One writer at a time: wait for the lock instead of failing, and use WAL so readers
        # do not block it. synchronous=NORMAL under WAL loses nothing a process crash could
        # take (an acknowledged commit is in the log file); only a power cut could.
        engine = sa.create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, pool_size=8
        )

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection, _record):
            # SQLAlchemy emits BEGIN itself (below), so savepoints work and every transaction
            # takes the write lock up front instead of failing to upgrade it mid-way.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @sa.event.listens_for(engine, "begin")
        def _begin(conn):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        engine = sa.create_engine(url, pool_size=16, max_overflow=16, pool_pre_ping=True)
    migrate(engine)
    return engine


def migrate(engine: sa.Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` with Alembic (idempotent)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def new_token() -> tuple[str, str]:
    """A bearer token and the hash the database keeps instead of it."""
    token = secrets.token_urlsafe(32)
    return token, token_hash(token)


def token_hash(token: str) -> str:
    # Tokens are 256 random bits, so a plain SHA-256 is enough: there is nothing to guess.
    return hashlib.sha256(token.encode()).hexdigest()
