"""The catalog's Alembic migrations, run through :mod:`tierd.daemon.catalog.migrate`.

- ``env``       the Alembic environment: runs on the engine tierd hands it (or alembic.ini's URL)
- ``versions/`` one revision per schema change, in order
- ``script.py.mako`` the template ``alembic revision`` fills in
"""
