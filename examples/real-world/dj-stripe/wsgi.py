"""The WSGI application gunicorn serves (`gunicorn wsgi:application`, run from this directory)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
application = get_wsgi_application()
