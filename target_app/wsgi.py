"""WSGI entry point for gunicorn: `gunicorn target_app.wsgi:app`.

The only module with an import-time side effect: it reads the settings from the
environment and builds the app.
"""

from target_app.app import create_app
from target_app.settings import Settings

app = create_app(Settings.from_env())
