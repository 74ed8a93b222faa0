"""dj-stripe's URLs as its documentation wires them: POST /stripe/webhook/<uuid>/."""

from django.urls import include, path

urlpatterns = [path("stripe/", include("djstripe.urls", namespace="djstripe"))]
