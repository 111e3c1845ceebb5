"""The collection service (``pip install 'privtd[service]'``): the server side of the data flow.

Workers' devices perturb their answers with the campaign's public mechanism
(:mod:`privtd.client`, or the browser page) and send only the perturbed reports; the server
(:func:`create_app`, ``privtd serve``) checks and stores them in SQLite or PostgreSQL and runs
the campaign's estimator over them. Schema: :mod:`.schema`, migrations: ``migrations/``.
"""

from . import db, requesters
from .app import create_app

__all__ = ["create_app", "db", "requesters"]
